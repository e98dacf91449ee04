"""The notifier tests' fixtures (tests/support/notifier.py): a webhook receiver, the notifier service, `publish`."""

from tests.support.notifier import ctx, notifier, publish, receiver

__all__ = ["ctx", "notifier", "publish", "receiver"]
