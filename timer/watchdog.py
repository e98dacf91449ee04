"""The hang watchdog: when no step completes for too long, dump the Flight Recorder trace once.

A daemon thread started at the first completed step checks every `poll_s` how long ago
the last step ended. The timeout calibrates itself (NVRx ft_launcher style):
``max(floor_s, factor x the longest step interval seen after warmup_steps)`` (before the
warm-up is over, every interval counts, which only makes it longer), capped at half the
shortest process-group timeout found in the trace, so the dump lands before the peers'
collectives time out and the ranks are torn down. `timeout_s` fixes it instead.

On a stall longer than the timeout it writes, once per stall (a new step re-arms it):

    <TORCH_FR_DUMP_TEMP_FILE><rank>      (else $VIGIL_HOME/fr/nccl_trace_rank_<rank>)

torch's Flight Recorder JSON (`_dump_fr_trace_json`, the same file name torch's own NCCL
dump-on-timeout uses, so the node agent ships both alike) plus `"rank"` and a `"vigil"`
object: the rank's process groups with their global ranks (gloo's `pg_config` is empty),
its last completed step, the trigger and where its training thread is. Written to a
temporary file and renamed, from the watchdog thread. Every rank of every group does this,
so the stuck collective's members all report; a rank wedged holding the GIL cannot, and
that absence is evidence too.

Guarantees: `beat()` (on the training thread, at each step end) is a few attribute writes;
nothing here raises into training or waits on it: a failing dump, an unwritable directory
or a missing `torch.distributed` is counted (`failures`, `last_error`) and the watchdog
carries on. Standard library and torch only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vigil.timer.config import HangConfig
from vigil.trainside import env

DumpFn = Callable[[], bytes]
MIN_TIMEOUT_S = 1.0


def default_prefix() -> str:
    """`TORCH_FR_DUMP_TEMP_FILE` (set by `vigil run`), else ``$VIGIL_HOME/fr/nccl_trace_rank_``."""
    explicit = env.text(env.FR_DUMP_PREFIX)
    if explicit:
        return explicit
    return str(env.home() / "fr" / "nccl_trace_rank_")


def torch_dump() -> bytes:
    """The Flight Recorder trace of every process group of this process, as JSON bytes."""
    import torch

    fn = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json")  # noqa: B009 - private, not in the stubs
    out = fn(includeCollectives=True, onlyActive=False)
    return out if isinstance(out, bytes) else str(out).encode()


def torch_groups() -> dict[str, list[int]]:
    """Process group name -> global ranks, for every group this process belongs to ({} without distributed)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return {}
    from torch.distributed import distributed_c10d as c10d

    out: dict[str, list[int]] = {}
    for pg, name in list(c10d._world.pg_names.items()):
        ranks = c10d._world.pg_group_ranks.get(pg)
        if ranks:
            out[str(name)] = sorted(int(r) for r in ranks)
    return out


def distributed_ready() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


class HangWatchdog:
    """Dumps the Flight Recorder trace once per stall; see the module docstring."""

    def __init__(self, config: HangConfig, *, rank: Callable[[], int], dump: DumpFn = torch_dump,
                 groups: Callable[[], dict[str, list[int]]] = torch_groups,
                 ready: Callable[[], bool] = distributed_ready, clock: Callable[[], float] = time.monotonic) -> None:
        env_timeout = env.number(env.HANG_TIMEOUT_S)
        self.fixed_s = config.timeout_s if config.timeout_s is not None else env_timeout
        self.factor = config.factor if config.factor is not None else (env.number(env.HANG_FACTOR) or 5.0)
        floor = config.floor_s if config.floor_s is not None else env.number(env.HANG_FLOOR_S)
        self.floor_s = floor if floor is not None else 10.0
        self.warmup = config.warmup_steps
        self.poll_s = config.poll_s
        self.prefix = config.dump_prefix or default_prefix()
        self._rank, self._dump, self._groups, self._ready, self._clock = rank, dump, groups, ready, clock
        self._last = 0.0
        self._step = -1
        self._beats = 0
        self._max_warmup = 0.0  # longest step interval during the warm-up steps
        self._max_steady = 0.0  # ... and after them
        self._thread_id = 0
        self._dumped_for = -1
        self._cap_s: float | None = None
        self._probed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dumps = 0
        self.failures = 0
        self.last_error = ""
        self.last_path: str | None = None

    # ---- training thread ----------------------------------------------------------------
    def beat(self, step: int) -> None:
        """A step ended (training thread): a few attribute writes, the thread starts at the first."""
        now = self._clock()
        if self._dumped_for == self._beats:
            pass  # the interval that just ended was a stall we dumped: not a step time to calibrate on
        elif self._beats > self.warmup:
            self._max_steady = max(self._max_steady, now - self._last)
        elif self._beats:
            self._max_warmup = max(self._max_warmup, now - self._last)
        else:
            self._thread_id = threading.get_ident()
            self._start()
        self._last, self._step = now, step
        self._beats += 1

    def _start(self) -> None:
        try:
            self._thread = threading.Thread(target=self._run, name="vigil-hang-watchdog", daemon=True)
            self._thread.start()
        except Exception as exc:  # a thread that cannot start is a watchdog that does not watch, nothing more
            self._fail(exc)

    # ---- watchdog thread ----------------------------------------------------------------
    @property
    def timeout_s(self) -> float | None:
        """The stall that triggers a dump (None: no step completed yet)."""
        if self.fixed_s is not None:
            return max(MIN_TIMEOUT_S, self.fixed_s)
        if not self._beats:
            return None
        longest = self._max_steady if self._beats > self.warmup + 1 else max(self._max_warmup, self._max_steady)
        t = max(self.floor_s, self.factor * longest)
        if self._cap_s is not None:
            t = min(t, self._cap_s)
        return max(MIN_TIMEOUT_S, t)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # never let the thread die, never raise into training
                self._fail(exc)

    def check(self) -> bool:
        """One look: True when this call wrote a dump."""
        if not self._probed and self._beats > self.warmup:
            self._probed = True
            self._cap_s = self._probe_cap()
        timeout = self.timeout_s
        beats = self._beats
        if timeout is None or self._clock() - self._last < timeout or self._dumped_for == beats:
            return False
        self._dumped_for = beats  # once per stall, whatever happens next
        if not self._ready():
            return False
        self._write(self._clock() - self._last)
        return True

    def _probe_cap(self) -> float | None:
        """Half the shortest process-group timeout in the trace (None when there is none to read)."""
        try:
            if not self._ready():
                return None
            doc = json.loads(self._dump())
            timeouts = [int(e["timeout_ms"]) for e in doc.get("entries", []) if e.get("timeout_ms")]
            return 0.5 * min(timeouts) / 1000 if timeouts else None
        except Exception as exc:
            self._fail(exc)
            return None

    def _stack(self) -> str:
        frame = sys._current_frames().get(self._thread_id)
        return "".join(traceback.format_stack(frame))[-8192:] if frame is not None else ""

    def _write(self, stalled_s: float) -> None:
        try:
            raw = self._dump()
            doc: dict[str, Any] = json.loads(raw)
            rank = int(self._rank())
            doc["rank"] = rank
            doc["vigil"] = {"trigger": "watchdog", "step": self._step if self._step >= 0 else None,
                            "stalled_s": round(stalled_s, 3), "timeout_s": self.timeout_s,
                            "group_ranks": self._groups(), "stack": self._stack()}
            path = f"{self.prefix}{rank}"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            tmp = f"{path}.tmp"
            with open(tmp, "w") as fh:
                json.dump(doc, fh)
            os.replace(tmp, path)
            self.dumps += 1
            self.last_path = path
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        if self.failures == 1:
            print(f"vigil timer: hang watchdog: {self.last_error} (training goes on)", file=sys.stderr, flush=True)

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
