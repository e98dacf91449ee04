"""The security tests attack a live recovery setup: the `live` fixture of tests/recovery."""

from tests.recovery.conftest import live

__all__ = ["live"]
