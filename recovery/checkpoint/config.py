"""`CheckpointConfig`: every setting of the checkpointer, keyword-only, checked when built.

    cfg = CheckpointConfig(directory="/shared/ckpt/llama", keep=3, dp_group="world")

Validation happens here (a wrong value is a `ConfigError` at start-up, never an error
in a training step); what needs the process group (does `dp_group` tile the world?) is
checked when the `Checkpointer` is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from vigil.recovery.checkpoint.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

OnBusy = Literal["wait", "skip"]
# a ProcessGroup of this rank's replicas, explicit rank lists (one per DP group), "world", or None
DPGroupSpec = Any


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Settings of a `Checkpointer`.

    directory: where checkpoints go; a local or shared-filesystem path, or an fsspec URL
        (``s3://...``, ``memory://...``) when fsspec is installed. Every rank must see the
        same directory (a shared filesystem across hosts).
    keep: newest complete checkpoints kept; older ones are deleted after each commit
        (None keeps all).
    dp_group: who holds identical state, for restore with one reader per group:
        a `ProcessGroup` of this rank's data-parallel replicas (e.g. ``mesh["dp"].get_group()``),
        or the rank lists of every DP group (``[[0, 2], [1, 3]]``), or ``"world"`` (plain DDP:
        every rank holds the same state), or None: every rank reads its own state (always
        correct; use it for FSDP/ZeRO state, which is sharded across data parallelism).
    on_busy: a save requested while the previous one still persists: ``"wait"`` up to
        `busy_timeout_s`, then skip; ``"skip"`` at once. Skips are counted and reported.
    persist_timeout_s: a save persisting longer is reported failed and never committed
        (None: no limit).
    pin_memory: stage CUDA tensors into pinned host memory (None: when CUDA is available).
    sync_files: fsync every file before the commit (what makes "committed" mean durable).
    writer_threads: file-writing threads per rank.
    collective_timeout_s: timeout of the checkpointer's own gloo groups (a dead peer
        turns into a failed save after this long, not a hang forever).
    events / spool_dir / job_id / host: the ``checkpoint`` event lines for the node agent
        (spool: `VIGIL_SPOOL_DIR`, else ``$VIGIL_HOME/spool``; job: `VIGIL_JOB_ID`;
        host: `VIGIL_HOST`, else the host name). event_file_bytes / event_files cap the
        spool files of this rank.
    storage_writer_factory / storage_reader_factory: build the torch.distributed.checkpoint
        StorageWriter / StorageReader for one checkpoint directory (custom storage,
        instrumentation); default: FileSystemWriter/Reader, or the fsspec ones for a URL.
    exit_timeout_s: at interpreter exit, how long to wait for a save still persisting.
    snapshot_dir / snapshot_every / snapshot_keep: in-memory snapshots (`Checkpointer.snapshot`,
        see `snapshot`): under ``<snapshot_dir>/<rank>`` (default `VIGIL_SNAPSHOT_DIR`, which
        `vigil run` sets to its host's memory, else ``/dev/shm/vigil/<job>``, a tmpfs), one every
        `snapshot_every` steps, the newest `snapshot_keep` kept; ``<snapshot_dir>/peer/<rank>``
        holds the node agent's copies of the rank from other hosts (read on restore). With
        ``dp_group="world"`` a snapshot of any rank (any world size) serves every rank.
    snapshot_wait_s: how long `snapshot()` waits for the previous snapshot's write before it
        skips this one (counted); 0: never wait (training is not held up by a slow tmpfs).
    snapshot_budget: the share of step time a snapshot may block training (default 0.03). Each
        rank measures its snapshots' copy and write time and its step time; at every `save` the
        ranks take the largest interval any of them needs (one every N steps, N >= `snapshot_every`,
        so the copy costs at most this share and the writer keeps up) and use it until the next
        save. None: a snapshot every `snapshot_every` steps, whatever it costs.
    """

    directory: str | os.PathLike[str]
    keep: int | None = 3
    dp_group: DPGroupSpec = None
    on_busy: OnBusy = "wait"
    busy_timeout_s: float = 30.0
    persist_timeout_s: float | None = 1800.0
    pin_memory: bool | None = None
    sync_files: bool = True
    writer_threads: int = 1
    collective_timeout_s: float = 600.0
    events: bool = True
    spool_dir: str | os.PathLike[str] | None = None
    job_id: str | None = None
    host: str | None = None
    event_file_bytes: int = 1 << 20
    event_files: int = 4
    storage_writer_factory: Callable[[str], StorageWriter] | None = None
    storage_reader_factory: Callable[[str], StorageReader] | None = None
    exit_timeout_s: float = 30.0
    snapshot_dir: str | os.PathLike[str] | None = None
    snapshot_every: int = 1
    snapshot_keep: int = 2
    snapshot_wait_s: float = 0.0
    snapshot_budget: float | None = 0.03

    def __post_init__(self) -> None:
        if not str(os.fspath(self.directory)).strip():
            raise ConfigError("directory must not be empty")
        if self.keep is not None and (not isinstance(self.keep, int) or self.keep < 1):
            raise ConfigError(f"keep must be None or an integer >= 1, got {self.keep!r}")
        if self.on_busy not in ("wait", "skip"):
            raise ConfigError(f"on_busy must be 'wait' or 'skip', got {self.on_busy!r}")
        if self.busy_timeout_s < 0:
            raise ConfigError(f"busy_timeout_s must be >= 0, got {self.busy_timeout_s}")
        if self.persist_timeout_s is not None and self.persist_timeout_s <= 0:
            raise ConfigError(f"persist_timeout_s must be None or > 0, got {self.persist_timeout_s}")
        if self.collective_timeout_s <= 0 or self.exit_timeout_s < 0:
            raise ConfigError("collective_timeout_s must be > 0 and exit_timeout_s >= 0")
        if self.writer_threads < 1 or self.event_file_bytes < 1 or self.event_files < 1:
            raise ConfigError("writer_threads, event_file_bytes and event_files must be >= 1")
        if not isinstance(self.snapshot_every, int) or not 1 <= self.snapshot_every <= 1_000_000:
            raise ConfigError(f"snapshot_every must be an integer in 1..1000000, got {self.snapshot_every!r}")
        if not isinstance(self.snapshot_keep, int) or self.snapshot_keep < 1:
            raise ConfigError(f"snapshot_keep must be an integer >= 1, got {self.snapshot_keep!r}")
        if self.snapshot_wait_s < 0:
            raise ConfigError(f"snapshot_wait_s must be >= 0, got {self.snapshot_wait_s}")
        if self.snapshot_budget is not None and not 0 < self.snapshot_budget <= 1:
            raise ConfigError(f"snapshot_budget must be None or in (0, 1], got {self.snapshot_budget}")
        if isinstance(self.dp_group, str) and self.dp_group != "world":
            raise ConfigError(f"dp_group: the only string accepted is 'world', got {self.dp_group!r}")
        if isinstance(self.dp_group, Sequence) and not isinstance(self.dp_group, str):
            rank_lists(self.dp_group)  # shape check; tiling the world is checked with the process group


def rank_lists(spec: Sequence[Any]) -> list[list[int]]:
    """`spec` as a list of rank lists; ConfigError unless it is non-empty lists of ints >= 0."""
    out: list[list[int]] = []
    for group in spec:
        if isinstance(group, str | bytes) or not isinstance(group, Sequence) or not group:
            raise ConfigError(f"dp_group: each DP group must be a non-empty list of ranks, got {group!r}")
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in group):
            raise ConfigError(f"dp_group: ranks must be integers >= 0, got {group!r}")
        out.append(sorted(group))
    if not out:
        raise ConfigError("dp_group: an empty list of DP groups")
    return out
