"""analyzer package."""
