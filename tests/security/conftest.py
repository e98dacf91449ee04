"""The security tests attack a live recovery setup (`live`, tests/support/live.py) and the notifier (its fixtures,
tests/support/notifier.py)."""

from tests.support.live import live, live_default_user
from tests.support.notifier import ctx, notifier, publish, receiver

__all__ = ["ctx", "live", "live_default_user", "notifier", "publish", "receiver"]
