"""Every ``VIGIL_*`` name the training side reads, once, with its meaning; and the three ways it reads them.

The node agent sets these for the processes it launches (`vigil run`; `collector.control.childenv` lets only
`INHERITED` and `INHERITED_PREFIXES` through from its own environment, never a credential), and the training side
(timer, checkpointer, node diagnostics) reads them. Readers never raise: a malformed value is ignored with a
`RuntimeWarning` that names it, and the caller's default applies.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

PREFIX = "VIGIL_"  # every name of vigil's own starts so (the agent withholds those not listed below from a child)
JOB_ID = "VIGIL_JOB_ID"  # the job this process belongs to (default "default")
HOST = "VIGIL_HOST"  # the host identity the agent ships for (default the host name)
HOME = "VIGIL_HOME"  # vigil's state directory (default ~/.vigil): spool/, fr/ below it
SPOOL_DIR = "VIGIL_SPOOL_DIR"  # where JSON-lines records go for the agent (default $VIGIL_HOME/spool)
SNAPSHOT_DIR = "VIGIL_SNAPSHOT_DIR"  # this host's in-memory snapshots of the job (the agent's snapshot memory)
CHECKPOINT_KEY_FILE = "VIGIL_CHECKPOINT_KEY_FILE"  # the job's integrity key, a file of the command's uid (set by the agent)
TIMER = "VIGIL_TIMER"  # 0/false/off/no: the step timer is a no-op
TP = "VIGIL_TP"  # tensor-parallel size, for deriving a rank's coordinates without Megatron
PP = "VIGIL_PP"  # pipeline-parallel size, likewise
FLOPS_PER_STEP = "VIGIL_FLOPS_PER_STEP"  # model FLOPs per step per rank (for TFLOP/s and MFU)
GPU_PEAK_TFLOPS = "VIGIL_GPU_PEAK_TFLOPS"  # the GPU's peak TFLOP/s (default: the table by GPU name)
HANG_PREFIX = "VIGIL_HANG_"  # the timer's hang watchdog:
HANG_WATCHDOG = "VIGIL_HANG_WATCHDOG"  # 0/false/off/no: no watchdog
HANG_TIMEOUT_S = "VIGIL_HANG_TIMEOUT_S"  # a fixed stall timeout (default: calibrated)
HANG_FACTOR = "VIGIL_HANG_FACTOR"  # the calibrated timeout is this x the longest step interval (5)
HANG_FLOOR_S = "VIGIL_HANG_FLOOR_S"  # the calibrated timeout is never shorter (10 s)
DIAG_PREFIX = "VIGIL_DIAG_"  # the node diagnostics' knobs (they run in the training environment):
DIAG_SLOWDOWN = "VIGIL_DIAG_SLOWDOWN"  # k >= 1 stretches each diagnostic's time k-fold (tests, demos)
COMMAND_ID = "VIGIL_COMMAND_ID"  # the diagnose command a diagnostics run answers (set per run by the agent)
INCIDENT_ID = "VIGIL_INCIDENT_ID"  # the incident it was run for (set per run by the agent)

GENERATION = "VIGIL_GENERATION"  # the world the agent's rendezvous formed (set per start, for the training script):
NNODES = "VIGIL_NNODES"  # how many hosts
NODE_RANK = "VIGIL_NODE_RANK"  # this host's index among them
MASTER_ADDR = "VIGIL_MASTER_ADDR"  # where rank 0's store listens
MASTER_PORT = "VIGIL_MASTER_PORT"  # and on which port
HOSTS = "VIGIL_HOSTS"  # the hosts, comma-separated, in node-rank order
RESTORE_MAX_STEP = "VIGIL_RESTORE_MAX_STEP"  # restore no snapshot or checkpoint newer than this step (an SDC rollback)
FR_DUMP_PREFIX = "TORCH_FR_DUMP_TEMP_FILE"  # torch's: Flight Recorder dumps go to <prefix><rank> (set by the agent)
WARM_SLOT = "VIGIL_WARM_SLOT"  # the local rank a warm interpreter waits to serve (warm launcher; the agent reads /proc)
RANK = "RANK"  # torchrun's: this process's global rank (torch.distributed's wins once initialised)
WORLD_SIZE = "WORLD_SIZE"  # torchrun's: how many ranks the job has
LOCAL_RANK = "LOCAL_RANK"  # torchrun's: this process's index on its host

INHERITED: frozenset[str] = frozenset({
    JOB_ID, HOST, SPOOL_DIR, TIMER, TP, PP, FLOPS_PER_STEP, GPU_PEAK_TFLOPS, SNAPSHOT_DIR,
})  # fmt: skip
"""The names a launched training command keeps from the agent's own environment: no credential, and not `HOME`
(where `vigil up` keeps state and keys: the job reads its own folders, named above, instead)."""
INHERITED_PREFIXES: tuple[str, ...] = (HANG_PREFIX, DIAG_PREFIX)
DIAGNOSTICS_IDENTITY: tuple[str, ...] = (JOB_ID, HOST, COMMAND_ID, INCIDENT_ID)
"""What the agent hands a diagnostics run (and a warm diagnostics child takes from its order line)."""
_OFF = ("0", "false", "off", "no")
N = TypeVar("N", int, float)


def text(name: str) -> str:
    """The variable's value stripped, '' when unset."""
    return os.environ.get(name, "").strip()


def flag(name: str) -> bool:
    """On unless set to 0 / false / off / no."""
    return text(name).lower() not in _OFF


def integer(name: str, minimum: int) -> int | None:
    """The variable as an int >= `minimum`; None when unset, empty or malformed (warned)."""
    return _parsed(name, int, lambda v: v >= minimum, "not an integer", f"below {minimum}")


def number(name: str) -> float | None:
    """The variable as a float > 0; None when unset, empty or anything else (warned)."""
    return _parsed(name, float, lambda v: v > 0, "not a number", "must be > 0")  # NaN is not > 0


def _parsed(name: str, convert: Callable[[str], N], valid: Callable[[N], bool], malformed: str, out: str) -> N | None:
    raw = text(name)
    if not raw:
        return None
    try:
        value = convert(raw)
    except ValueError:
        value = None
    why = malformed if value is None else "" if valid(value) else out
    if why:
        warnings.warn(f"vigil: ignoring {name}={raw!r} ({why})", RuntimeWarning, stacklevel=3)
        return None
    return value


def home() -> Path:
    """`VIGIL_HOME`, else ``~/.vigil``."""
    return Path(text(HOME) or "~/.vigil").expanduser()


def default_spool_dir() -> Path:
    """`VIGIL_SPOOL_DIR`, else ``$VIGIL_HOME/spool``."""
    explicit = text(SPOOL_DIR)
    return Path(explicit).expanduser() if explicit else home() / "spool"
