"""Per-phase overhead of the step timer on the CPU, against the usual alternatives.

Each variant runs the same empty phase body N times (best of R repeats) and the bare
loop's time is subtracted, so the figures are the instrumentation's own cost:

* ``StepTimer.phase``          - `with t.phase("p")` inside an open step (host clock);
* ``StepTimer.phase disabled``  - the same with `enabled=False` (shared no-op context);
* ``record_function``          - `torch.profiler.record_function("p")` with no profiler
                                  running (what code instrumented for the profiler pays);
* ``sync timer (Megatron)``    - Megatron-style timer: start()/stop() each take
                                  `time.perf_counter()` after a device synchronisation.
                                  On the CPU there is no device to drain, so the stand-in
                                  for ``torch.cuda.synchronize()`` is one tiny torch op
                                  (``x.add_(0)`` on a 1-element tensor): a lower bound on a
                                  real synchronising timer, whose cost on a GPU is the
                                  drained queue (see gpu_timer_overhead.py).

It also reports per-step cost: the hot path of an empty `with t.step()` and the same plus
the spool thread's rendering and writing (everything the timer costs the process).

    python bench/timer_overhead.py [--n 200000] [--repeats 5]

Prints a table and appends a dated section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from vigil.timer import SpoolConfig, StepTimer, TimerConfig

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TARGET_US = 3.0


def best_ns(fn: Callable[[int], None], n: int, repeats: int) -> float:
    """Best wall time of fn(n) over `repeats`, in ns per iteration."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def bare(n: int) -> None:
    for _ in range(n):
        pass


def make_phase_loop(t: StepTimer) -> Callable[[int], None]:
    def loop(n: int) -> None:
        phase = t.phase
        with t.step():
            for _ in range(n):
                with phase("p"):
                    pass

    return loop


def record_function_loop(n: int) -> None:
    rf = torch.profiler.record_function
    for _ in range(n):
        with rf("p"):
            pass


class SyncTimer:
    """Megatron-style timer: synchronise, then read the host clock, at start and stop."""

    def __init__(self, sync: Callable[[], object]) -> None:
        self.sync, self.elapsed, self._t0 = sync, 0.0, 0.0

    def start(self) -> None:
        self.sync()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.sync()
        self.elapsed += time.perf_counter() - self._t0


def sync_timer_loop(n: int) -> None:
    x = torch.zeros(1)
    timer = SyncTimer(lambda: x.add_(0))
    for _ in range(n):
        timer.start()
        timer.stop()


def step_loop(t: StepTimer) -> Callable[[int], None]:
    def loop(n: int) -> None:
        step = t.step
        for _ in range(n):
            with step():
                pass

    return loop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    n, r = args.n, args.repeats
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as spool:
        base = best_ns(bare, n, r)
        on = StepTimer(TimerConfig(device="cpu", job_id="bench", host="bench", spool=SpoolConfig(directory=spool)))
        off = StepTimer(TimerConfig(device="cpu", enabled=False, spool=SpoolConfig(directory=spool)))
        rows = [
            ("StepTimer.phase", best_ns(make_phase_loop(on), n, r) - base),
            ("StepTimer.phase disabled", best_ns(make_phase_loop(off), n, r) - base),
            ("torch.profiler.record_function", best_ns(record_function_loop, n, r) - base),
            ("sync timer (Megatron-style, CPU stand-in)", best_ns(sync_timer_loop, n, r) - base),
        ]
        on.close()
        steps = min(n, 50_000)
        hot = StepTimer(TimerConfig(device="cpu", job_id="bench", host="hot", spool=SpoolConfig(
            directory=spool, queue_size=steps + 1, flush_interval_s=3600)))  # fmt: skip
        hot_ns = best_ns(step_loop(hot), steps, 1) - base
        t0 = time.perf_counter_ns()
        hot.flush(timeout=120)
        total_ns = hot_ns + (time.perf_counter_ns() - t0) / steps
        written, dropped = hot.written, hot.dropped
        hot.close()

    lines = [
        f"| variant | µs per phase (N={n:,}, best of {r}) |",
        "|---|---:|",
        *[f"| {name} | {ns / 1e3:.3f} |" for name, ns in rows],
        "",
        "| per step | µs |",
        "|---|---:|",
        f"| empty `with t.step()`, training thread | {hot_ns / 1e3:.3f} |",
        f"| same + spool thread render/write ({written:,} written, {dropped} dropped) | {total_ns / 1e3:.3f} |",
    ]
    phase_us = rows[0][1] / 1e3
    verdict = f"StepTimer.phase: {phase_us:.3f} µs (target < {TARGET_US} µs: {'met' if phase_us < TARGET_US else 'MISSED'})"
    print("\n".join(lines))
    print(verdict)
    if not args.no_append:
        header = (
            f"\n## timer_overhead.py — {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n\n"
            f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs, {platform.platform()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}. Bare loop {base:.1f} ns/iter "
            "subtracted.\n\n"
        )
        with RESULTS.open("a", encoding="utf-8") as fh:
            if fh.tell() == 0:
                fh.write("# Benchmark results\n\nAppended by the scripts in bench/; newest last.\n")
            fh.write(header + "\n".join(lines) + f"\n\n{verdict}\n")
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
