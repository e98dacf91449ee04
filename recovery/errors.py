"""The recovery controller's errors (the checkpointer has its own tree, `recovery.checkpoint.errors`).

    VigilError
    └── RecoveryError
        ├── BackendError        a node backend could not cordon, uncordon, evict or list
        │   └── BackendTimeout  it did not answer in time: what it did is unknown
        └── NotFound            `vigil recovery approve ID`: no open recovery has that id
"""

from __future__ import annotations

from vigil.errors import VigilError


class RecoveryError(VigilError):
    """Base of the recovery controller's errors."""


class BackendError(RecoveryError):
    """A node backend failed; the message names the host and the backend."""


class BackendTimeout(BackendError):
    """A backend call passed its bound: it may or may not have taken effect."""


class NotFound(RecoveryError):
    """No recovery matches the id given."""
