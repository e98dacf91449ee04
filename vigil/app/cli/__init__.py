"""The `vigil` command-line interface."""
