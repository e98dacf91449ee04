"""collector package."""
