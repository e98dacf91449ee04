"""Node backends."""
