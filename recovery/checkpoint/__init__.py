"""Two-phase checkpointing inside the training process, and restore with one reader per DP group.

    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState

    ckpt = Checkpointer(CheckpointConfig(directory="/shared/ckpt/run1", keep=3, dp_group="world"))
    state = {"train": TrainState(model, optimizer)}
    start = (ckpt.load_latest(state) or 0) + 1
    for step in range(start, steps + 1):
        train_step()
        if step % 10 == 0:
            ckpt.save(step, state)   # blocks only while the state is copied to host memory
    ckpt.close()                     # waits for the last save to be committed

Modules, one concept each: `config` (the settings), `staging` (phase 1: copy to host
memory), `persist` (phase 2: background `dcp.save`, commit, retention), `layout`
(attempt directories, the commit marker, pruning), `stores` (DCP writers/readers and the
marker's atomic write, on a path or an fsspec URL), `coordination` (the checkpointer's
process groups and how ranks agree), `restore` (one reader per DP group + broadcast),
`events` / `spool` (``checkpoint`` event lines for the node agent), `state`
(`TrainState`), `errors` (the error tree), `checkpointer` (the facade), `ddp` (`settle_ddp`:
bitwise continuation of a DistributedDataParallel model after a restore).

Imports only the standard library and torch. See recovery/README.md.
"""

from vigil.recovery.checkpoint.checkpointer import Checkpointer, Stats
from vigil.recovery.checkpoint.config import CheckpointConfig
from vigil.recovery.checkpoint.ddp import settle_ddp
from vigil.recovery.checkpoint.errors import (
    CheckpointError,
    ConfigError,
    CoordinationFailed,
    PersistTimeout,
    RestoreError,
    SaveFailed,
    StagingFailed,
    StorageFailed,
)
from vigil.recovery.checkpoint.layout import Commit
from vigil.recovery.checkpoint.restore import RestoreReport
from vigil.recovery.checkpoint.rng import RNGState
from vigil.recovery.checkpoint.state import TrainState

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "Checkpointer",
    "Commit",
    "ConfigError",
    "CoordinationFailed",
    "PersistTimeout",
    "RNGState",
    "RestoreError",
    "RestoreReport",
    "SaveFailed",
    "StagingFailed",
    "Stats",
    "StorageFailed",
    "TrainState",
    "settle_ddp",
]
