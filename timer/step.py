"""One step's timing state, and its rendering into a `StepTiming` record (a plain dict).

A `Step` is what `with timer.step() as s:` yields. Its public attributes `tokens`,
`samples` and `flops` may be set inside the step (they must be Python numbers, not
tensors: converting a CUDA tensor would synchronise). Phase durations are summed per
name, so a phase entered once per micro-batch reports its total for the step.

Rendering runs on the spool thread, so building the dict (and the uuid) costs the
training thread nothing. `phase_kinds` carries the kinds declared with
``phase(name, kind=...)`` (absent when none was). Keys whose name starts with ``_`` are the timer's own:
``_host`` is the host wall-clock step time on the CUDA path, where `step_ms` is the
device time between the step's first and last event. The health signals (`timer.health`) are
rendered where the step reported them, each key only when given; so is the replica digest (`timer.digest`).
"""

from __future__ import annotations

import math
from typing import Any

from vigil.timer.digest import rendered as digest_value
from vigil.timer.health import rendered
from vigil.timer.identity import Identity
from vigil.timer.mfu import throughput

HOST_KEY = "_host"


class Step:
    """Timing state of one step (or of phases waiting for the next step to open)."""

    __slots__ = (
        "digest",
    "end",
        "failed",
        "flops",
        "health",
        "host_ms",
        "host_t0",
        "index",
        "is_open",
        "kinds",
        "phases",
        "samples",
        "spans",
        "start",
        "step_ms",
        "tokens",
        "ts",
    )

    def __init__(self) -> None:
        self.index = 0
        self.tokens: int | None = None
        self.samples: int | None = None
        self.flops: float | None = None
        self.failed = False
        self.is_open = False
        self.host_t0 = 0
        self.host_ms = 0.0
        self.step_ms = 0.0
        self.ts = 0.0
        self.phases: dict[str, float] = {}  # name -> ms, filled directly on the host clock
        self.kinds: dict[str, str] = {}  # name -> declared kind (compute/comm/wait), only where declared
        self.spans: list[tuple[str, Any, Any]] = []  # (name, start event, end event) on CUDA
        self.start: Any = None  # clock mark at step entry (ns or a CUDA event)
        self.end: Any = None
        self.digest: Any = None  # the replica digest as captured (timer.digest), on the steps that take one
        self.health: dict[str, Any] = {}  # loss/grad_norm/nonfinite/update_ratio as captured (timer.health)

    @property
    def step(self) -> int:
        """The step number this record will carry."""
        return self.index

    def __repr__(self) -> str:
        return f"Step(step={self.index}, open={self.is_open}, failed={self.failed}, phases={self.phases})"


def _count(value: Any) -> int | None:
    if value is None:
        return None
    out = int(value)
    return out if out >= 0 else None


def _ms(value: float) -> float:
    return round(value, 4) if math.isfinite(value) and value > 0 else 0.0


def render(
    step: Step, ident: Identity, default_flops: float | None, peak_tflops: float | None
) -> dict[str, Any]:
    """The step as a dict that validates against `vigil.contract.telemetry.StepTiming`.

    `event_id` and `dropped` are filled in by the spool writer when the line is written.
    """
    phases: dict[str, float] = {}
    for name, ms in step.phases.items():
        key = name[:256] or "_"
        phases[key] = phases.get(key, 0.0) + _ms(ms)
    kinds = {name[:256] or "_": kind for name, kind in step.kinds.items() if name in step.phases}
    step_ms = _ms(step.step_ms)
    flops = step.flops if step.flops is not None else default_flops
    # a failed step did not do its work: no throughput for it
    tflops, mfu = (None, None) if step.failed else throughput(flops, step_ms, peak_tflops)
    record: dict[str, Any] = {
        "kind": "step",
        "schema_version": 1,
        "job_id": ident.job_id,
        "host": ident.host,
        "ts": step.ts,
        "rank": ident.rank,
        "local_rank": ident.local_rank,
        "world_size": ident.world_size,
        "coords": dict(ident.coords),
        "step": step.index,
        "step_ms": step_ms,
        "phases": phases,
        "tokens": _count(step.tokens),
        "samples": _count(step.samples),
        "tflops": None if tflops is None else round(tflops, 4),
        "mfu": None if mfu is None else round(mfu, 6),
        "failed": step.failed,
        "dropped": 0,
    }
    if step.health:  # only when reported, like the kinds
        record.update(rendered(step.health))
    if step.digest is not None:
        value = digest_value(step.digest)
        if value is not None:
            record["digest"] = value
    if kinds:  # only when declared: lines stay as they were for code that declares none
        record["phase_kinds"] = kinds
    return record
