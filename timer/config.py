"""`TimerConfig`: everything a `StepTimer` can be told, as keyword-only, frozen dataclasses.

    StepTimer()                                            # all from the environment
    StepTimer(TimerConfig(flops_per_step=6 * n_params * tokens))
    StepTimer(TimerConfig(device="cpu", job_id="exp-7", spool=SpoolConfig(directory="/scratch/spool")))

Every field left at None falls back to the environment (see `timer.identity`, `timer.mfu`,
`default_spool_dir`), so a config only says what differs. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class SpoolConfig:
    """Where and how step records are written for the node agent (see `vigil.trainside.spool`)."""

    directory: str | os.PathLike[str] | None = None  # None: VIGIL_SPOOL_DIR, else $VIGIL_HOME/spool
    max_file_bytes: int = 16 << 20
    keep_files: int | None = 8
    queue_size: int = 4096
    flush_interval_s: float = 0.5
    retry_s: float = 5.0


@dataclass(frozen=True, kw_only=True)
class HangConfig:
    """The hang watchdog (see `timer.watchdog`); None fields fall back to `VIGIL_HANG_*`, then the default."""

    enabled: bool | None = None  # None: on unless VIGIL_HANG_WATCHDOG=0
    timeout_s: float | None = None  # a fixed stall timeout (VIGIL_HANG_TIMEOUT_S); None: calibrated
    factor: float | None = None  # x the longest step interval after warm-up (VIGIL_HANG_FACTOR, 5)
    floor_s: float | None = None  # the calibrated timeout is never shorter (VIGIL_HANG_FLOOR_S, 10)
    warmup_steps: int = 5  # step intervals not used for calibration (init, compile, first allocations)
    poll_s: float = 0.5  # how often the watchdog thread looks
    dump_prefix: str | None = None  # None: TORCH_FR_DUMP_TEMP_FILE, else $VIGIL_HOME/fr/nccl_trace_rank_

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.poll_s <= 0:
            raise ValueError("warmup_steps must be >= 0 and poll_s > 0")


@dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """What a `StepTimer` times, who it says it is, and where its records go."""

    enabled: bool | None = None  # None: on unless VIGIL_TIMER=0
    device: Any = None  # "cpu" forces the host clock; "cuda"/"cuda:N"/a torch.device forces CUDA events
    # identity (None: from torch.distributed / torchrun / `vigil run` environment)
    job_id: str | None = None
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    coords: Mapping[str, int] | None = None
    # throughput
    flops_per_step: float | None = None  # None: VIGIL_FLOPS_PER_STEP
    gpu_peak_tflops: float | None = None  # None: VIGIL_GPU_PEAK_TFLOPS, else the table by GPU name
    start_step: int = 0
    max_pending: int = 64  # CUDA steps waiting for their events before the oldest is dropped
    digest_every: int = 50  # `StepTimer.digest` computes a replica digest every this many steps; 0: never
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    hang: HangConfig = field(default_factory=HangConfig)

    def __post_init__(self) -> None:
        if self.digest_every < 0:
            raise ValueError(f"digest_every must be >= 0, got {self.digest_every}")
        if self.start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {self.start_step}")
