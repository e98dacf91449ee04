"""The errors of the checkpoint package.

    CheckpointError
    ├── ConfigError (also ValueError)   a CheckpointConfig value or DP layout that cannot work
    ├── SaveFailed                      one save did not become a committed checkpoint
    │   ├── StagingFailed               copying the state to host memory failed (out of memory, bad state)
    │   ├── StorageFailed               the storage refused: full, unwritable, missing, a torn peer write
    │   ├── PersistTimeout              persisting took longer than persist_timeout_s: not committed
    │   └── CoordinationFailed          ranks disagreed (step, a peer could not stage) or a collective failed
    └── RestoreError                    committed checkpoints exist but none could be loaded

`SaveFailed` is never raised into the training loop: `Checkpointer.save` reports it as a
``failed`` event and keeps it in `Checkpointer.last_error`. `ConfigError` is raised when the
`CheckpointConfig` / `Checkpointer` is built (start-up, not a training step); `RestoreError`
by `Checkpointer.load_latest`, also at start-up, because silently starting from scratch
when a checkpoint exists but cannot be read would throw the job's progress away.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base of every error the checkpoint package raises or reports."""


class ConfigError(CheckpointError, ValueError):
    """A `CheckpointConfig` value, or a data-parallel layout, that cannot work."""


class SaveFailed(CheckpointError):
    """One save did not become a committed checkpoint (reported, never raised from `save`)."""


class StagingFailed(SaveFailed):
    """The state could not be copied to host memory (allocation failed, unsupported value)."""


class StorageFailed(SaveFailed):
    """The storage refused the write: full, unwritable, missing; or a rank's write failed."""


class PersistTimeout(SaveFailed):
    """Persisting took longer than `persist_timeout_s`; the checkpoint is not committed."""


class CoordinationFailed(SaveFailed):
    """Ranks disagreed (step number, a peer could not stage) or a collective failed."""


class RestoreError(CheckpointError):
    """Committed checkpoints exist but none could be loaded, or replicas disagree on the state layout.

    `rejected`: (step, path, why) of each checkpoint that failed verification on the way.
    """

    def __init__(self, message: str, *, rejected: tuple[tuple[int, str, str], ...] = ()) -> None:
        super().__init__(message)
        self.rejected = rejected
