"""The goodput ledger: a job's wall clock over a window split into where the time went.

Categories (seconds, `Category`), each from the record that owns it:
- productive: distinct steps completed x the ideal step time (vigil.contract.goodput: ETTR = productive / wall);
- slowdown: per distinct step, its time above the ideal (a straggler, a throttled GPU, a slow NIC) less what
  the data loader and the SDC checks below explain, charged to the hosts whose compute phases ran longer than
  their peers', in proportion (`slowdown_by`);
- data_loader: the data phases (`DATA_PHASES`) of a step above their typical (median) time, out of the step's
  time above the ideal; and all of a data phase timed outside the step (loading before `with t.step()`:
  not in the step time, so not in the ideal either). A loader that is always slow is in the ideal step time;
- checkpoint_save: training blocked by checkpoint saves (the ranks' `checkpoint` events, `blocked_ms`);
- steps_redone: the steps lost to each fault's recovery (completed before the fault - restored) x the ideal;
- detect, decide, pause, diagnose, restart, restore: each fault recovery's outcome time split (restart
  without the checkpoint load, which is restore);
- elastic_resize: the whole cost (every phase and the steps redone) of a planned resize: a recovery case of a
  category in `RESIZE_CATEGORIES` (the controller's scale-up); a shrink a fault forced is that fault's recovery;
- sdc: silent-data-corruption checks and replays: check phases (`SDC_PHASES`) above their typical time, and the
  whole cost of a case of a category in `SDC_CATEGORIES` (the controller's rollback and replay, and the cordon and
  restart of a persistent verdict): its phases and its steps redone, which hold the replay's recomputed steps (from
  the restored step to the first bad one) and the rest the rollback threw away, the steps trained while the fault
  was detected and decided among them (so not its detect and decide time again). 0 until such events exist;
- idle: the rest of the wall clock (launch, waits nothing above explains).
The categories sum to the wall clock; where the records claim more than the wall clock (they overlap),
`over_s` says by how much and idle is 0: `balanced()` is the check (within 0.5 %).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import median


class Category(StrEnum):
    PRODUCTIVE = "productive"
    SLOWDOWN = "slowdown"
    DATA_LOADER = "data_loader"
    CHECKPOINT_SAVE = "checkpoint_save"
    STEPS_REDONE = "steps_redone"
    DETECT = "detect"
    DECIDE = "decide"
    PAUSE = "pause"
    DIAGNOSE = "diagnose"
    RESTART = "restart"
    RESTORE = "restore"
    ELASTIC_RESIZE = "elastic_resize"
    SDC = "sdc"
    IDLE = "idle"


RECOVERY = ("detect", "decide", "pause", "diagnose", "restart", "restore")
RECOVERY_CATEGORIES: tuple[str, ...] = (*RECOVERY, "steps_redone", "elastic_resize", "sdc")  # its keys
CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)
TOLERANCE = 0.005
WINDOWS: dict[str, float | None] = {"5m": 300.0, "1h": 3600.0, "1d": 86400.0, "all": None}  # rolling, seconds
DATA_PHASES: tuple[str, ...] = ("data", "data_wait", "dataloader", "input")  # the data loader's phases
SDC_PHASES: tuple[str, ...] = ("sdc_check", "replica_digest", "digest")  # SDC checks timed as phases
RESIZE_CATEGORIES: frozenset[str] = frozenset({"scale"})  # recovery cases that are planned resizes
SDC_CATEGORIES: frozenset[str] = frozenset({"silent_data_corruption"})  # recovery cases that are SDC rollbacks


@dataclass(frozen=True)
class StepTime:
    """One distinct step: its time (ms, mean over ranks), the share of it in the window (the window's start may
    cut it), its data phases' time in the step and before it, and its SDC check phases' time."""

    ms: float
    share: float = 1.0
    data_ms: float = 0.0
    data_outside_ms: float = 0.0
    sdc_ms: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Ledger:
    wall_s: float
    seconds: dict[str, float] = field(default_factory=dict)  # by category, CATEGORIES' order
    over_s: float = 0.0  # what the records claim beyond the wall clock
    slowdown_by: dict[str, float] = field(default_factory=dict)  # slowdown seconds charged to each host

    @property
    def ettr(self) -> float | None:
        return self.seconds["productive"] / self.wall_s if self.wall_s > 0 else None

    def balanced(self) -> bool:
        """The categories sum to the wall clock within 0.5 %."""
        return self.wall_s > 0 and abs(sum(self.seconds.values()) - self.wall_s) <= TOLERANCE * self.wall_s


def _step(t: float | tuple[float, float] | StepTime) -> StepTime:
    if isinstance(t, StepTime):
        return t
    return StepTime(*t) if isinstance(t, tuple) else StepTime(t)


def typical_ms(values: Sequence[float]) -> float:
    """The median (0 with none): a phase that runs on some steps only is typically 0, all of it extra."""
    return float(median(values)) if values else 0.0


def ledger(*, wall_s: float, ideal_ms: float, step_ms: Iterable[float | tuple[float, float] | StepTime],
           save_blocked_ms: Iterable[float] = (), outcomes: Iterable[Mapping[str, object]] = (),
           excess_ms: Mapping[str, float] | None = None, typical_data_ms: float | None = None,
           typical_sdc_ms: float | None = None) -> Ledger:
    """Split `wall_s`: `step_ms` one entry per distinct step completed in it (a time, (time, share), or a
    `StepTime`), `outcomes` the recoveries that ended in it (their category, detect_s ... restart_s,
    checkpoint_load_s, steps_lost); `excess_ms`: per host its compute time above its peers' (the slowdown is
    charged to hosts in proportion); `typical_data_ms` / `typical_sdc_ms`: the job's typical in-step data and
    check phase times (default: the median of these steps')."""
    steps = [_step(t) for t in step_ms]
    td = typical_ms([s.data_ms for s in steps]) if typical_data_ms is None else typical_data_ms
    tc = typical_ms([s.sdc_ms for s in steps]) if typical_sdc_ms is None else typical_sdc_ms
    s = dict.fromkeys(CATEGORIES, 0.0)
    for st in steps:
        s["productive"] += st.share * ideal_ms / 1000
        over = max(0.0, st.ms - ideal_ms)
        data, check = max(0.0, st.data_ms - td), max(0.0, st.sdc_ms - tc)
        if data + check > over:  # explain no more than the step's time above the ideal
            data, check = (data * over / (data + check), check * over / (data + check))
        s["slowdown"] += st.share * (over - data - check) / 1000
        s["data_loader"] += st.share * (data + st.data_outside_ms) / 1000
        s["sdc"] += st.share * check / 1000
    s["checkpoint_save"] = sum(save_blocked_ms) / 1000
    for o in outcomes:
        _charge(s, o, ideal_ms)
    claimed = sum(s.values())
    s["idle"] = max(0.0, wall_s - claimed)
    excess = {h: v for h, v in (excess_ms or {}).items() if v > 0}
    total = sum(excess.values())
    by = {h: round(s["slowdown"] * v / total, 3) for h, v in sorted(excess.items(), key=lambda kv: -kv[1])}
    return Ledger(wall_s=wall_s, seconds={k: round(v, 3) for k, v in s.items()},
                  over_s=round(max(0.0, claimed - wall_s), 3), slowdown_by=by)


def _num(o: Mapping[str, object], key: str) -> float:
    v = o.get(key)
    return float(v) if isinstance(v, int | float) else 0.0


def recovery_seconds(o: Mapping[str, object], ideal_ms: float) -> dict[str, float]:
    """What one recovery outcome (its category, detect_s ... restart_s, checkpoint_load_s, steps_lost) costs, by
    category: its phases and its steps redone at `ideal_ms`, or all of it to a resize or an SDC replay (keys with
    a cost only; the recovery controller's metrics count these too)."""
    load = _num(o, "checkpoint_load_s")
    parts = {k: _num(o, f"{k}_s") for k in ("detect", "decide", "pause", "diagnose")}
    parts["restart"] = max(0.0, _num(o, "restart_s") - load)
    parts["restore"] = load
    redone = _num(o, "steps_lost") * ideal_ms / 1000
    cat = str(o.get("category") or "")
    whole = "elastic_resize" if cat in RESIZE_CATEGORIES else "sdc" if cat in SDC_CATEGORIES else None
    if whole == "sdc":  # the job trained on while the fault was found and decided: those steps are among the redone
        parts["detect"] = parts["decide"] = 0.0
    if whole is not None:
        return {whole: sum(parts.values()) + redone}
    return {k: v for k, v in {**parts, "steps_redone": redone}.items() if v}


def _charge(s: dict[str, float], o: Mapping[str, object], ideal_ms: float) -> None:
    for k, v in recovery_seconds(o, ideal_ms).items():
        s[k] += v


@dataclass(frozen=True, kw_only=True)
class FleetLedger:
    """Every job's ledger over a window, in GPU-hours (a job's seconds x its GPUs / 3600)."""

    gpu_hours: dict[str, float]  # by category
    wall_gpu_hours: float
    jobs: dict[str, float]  # each job's GPUs

    @property
    def ettr(self) -> float | None:
        return self.gpu_hours["productive"] / self.wall_gpu_hours if self.wall_gpu_hours > 0 else None

    def balanced(self) -> bool:
        return (self.wall_gpu_hours > 0
                and abs(sum(self.gpu_hours.values()) - self.wall_gpu_hours) <= TOLERANCE * self.wall_gpu_hours)


def fleet(ledgers: Mapping[str, tuple[Ledger, float]]) -> FleetLedger:
    """The fleet's ledger from each job's (ledger, GPUs)."""
    hours = dict.fromkeys(CATEGORIES, 0.0)
    wall = 0.0
    for led, gpus in ledgers.values():
        wall += led.wall_s * gpus / 3600
        for k, v in led.seconds.items():
            hours[k] += v * gpus / 3600
    return FleetLedger(gpu_hours={k: round(v, 6) for k, v in hours.items()}, wall_gpu_hours=round(wall, 6),
                       jobs={j: g for j, (_, g) in ledgers.items()})
