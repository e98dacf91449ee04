"""Recovery time: fault onset -> training resumed (the first step after the restart), per fault and host count.

For each host count (`--hosts`, default 2, 3, 6: one rank per host, all on this machine) one real
job runs under recovery control and faults three times, each recovered from the in-memory
snapshots (bench/recovery_faults.py): a crash (software: pause, restart on the same hosts, every
rank restores its own snapshot), a hang (dump, pause, diagnose, restart; own snapshots), an Xid
(hardware: pause, diagnose, cordon, the spare replaces the host, the lost host's rank restores the
copy its buddy held: source `peer`). Each row splits onset -> first step into detect, decide,
pause, diagnose, launch, restore and first step; steps lost and the restore source. Detection is
this script's stand-in for the analyzer (the exit or the Xid line on Kafka; no step for
`--stall-s` for the hang), timed from the worker's own onset; the analyzer's latency is in the
analyzer benches. The cost should be flat in the host count.

Then what snapshots cost at real sizes (bench/snapshot.py's leg, one process, `--mib` per rank,
a snapshot every step at `--step-ms`): the time a `snapshot()` call blocks training (median),
its share of the step, the shortest step at which it stays within 3 %, and the memory each host
holds (measured on the live jobs; at `--mib`: the rank's K=2 snapshots + 1 being written + its
buddy's K copies on the tmpfs, + 1 staged copy in the process).
Goals (issue 24, 3 hosts, CPU): crash and Xid <= 10 s onset -> first step, hang <= 20 s, steps
lost <= 1, snapshot overhead <= 3 % of step time.

    python bench/recovery_time.py [--hosts 2,3,6] [--faults crash,hang,xid] [--mib 50,500] [--no-append]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer_common import append_results, machine_info  # noqa: E402
from recovery_faults import run_job  # noqa: E402

K = 2  # snapshots kept per rank (the default)


def s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| hosts | fault | result | detect s | decide s | pause s | diagnose s | launch s | restore s | first step s "
             "| total s (onset -> first step) | resumed from step (source) | steps lost | cordoned |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['hosts']} | {r['fault']} | {r['result']} | {s(r['detect_s'])} | {s(r['decide_s'])} | {s(r['pause_s'])} "
                     f"| {s(r['diagnose_s'])} | {s(r['launch_s'])} | {s(r['restore_s'])} | {s(r['first_step_s'])} "
                     f"| **{s(r['total_s'])}** | {r['checkpoint_step']} ({r['source'] or '-'}) | {r['steps_lost']} "
                     f"| {', '.join(r['cordoned']) or '-'} |")  # fmt: skip
    return "\n".join(lines)


def memory_table(jobs: dict[int, dict[str, Any]]) -> str:
    lines = ["| hosts | own snapshots KiB per host (max) | buddy copies KiB per host (max) |", "|---:|---:|---:|"]
    for n, held in jobs.items():
        mem = held.values()
        lines.append(f"| {n} | {max((m['own'] for m in mem), default=0) / 1024:.0f} "
                     f"| {max((m['peer'] for m in mem), default=0) / 1024:.0f} |")  # fmt: skip
    return "\n".join(lines)


def overhead_table(mibs: list[int], steps: int, step_ms: float, base: Path) -> str:
    from snapshot import leg  # bench/snapshot.py: one process, a snapshot every step

    lines = [f"| state per rank MiB | blocked ms per snapshot taken (median) | taken / skipped (writer busy) of {steps} "
             f"| overhead at {step_ms:g} ms steps (mean blocked / step) | shortest step a snapshot every step keeps "
             "within 3 % | tmpfs per host, 1 rank (own K+1 + buddy K) | + staged copy in the process |",
             "|---:|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for mib in mibs:
        r = leg(mib, steps, step_ms, base)
        taken = r["taken_ms"]
        lines.append(f"| {mib} | {s(taken)} | {r['written']} / {r['skipped']} | {100 * r['mean_overhead']:.1f} % "
                     f"| {'-' if taken is None else f'{taken / 0.03 / 1e3:.2f} s'} | {(2 * K + 1) * mib} MiB "
                     f"| {mib} MiB |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="2,3,6")
    ap.add_argument("--faults", default="crash,hang,xid")
    ap.add_argument("--stall-s", type=float, default=5.0, help="hang: no step for this long is the trigger")
    ap.add_argument("--gap-s", type=float, default=20.0, help="a fault is armed this long after the previous "
                    "one was recovered (back to back, the agents' warm interpreters are still importing)")
    ap.add_argument("--mib", default="50,500", help="snapshot cost legs: state per rank (empty: none)")
    ap.add_argument("--step-ms", type=float, default=1000.0, help="snapshot cost legs: the step time")
    ap.add_argument("--steps", type=int, default=12, help="snapshot cost legs: steps per leg")
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    import torch

    from vigil.kafka.broker import EmbeddedBroker

    torch.set_num_threads(1)
    jobs: dict[int, dict[str, Any]] = {}  # host count -> memory held per host
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vigil-recovery-bench-") as tmp:
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tmp)
        with tempfile.TemporaryDirectory(prefix="vigil-bench-snap-", dir=shm) as snaps:  # first: it is short
            mibs = [int(m) for m in args.mib.split(",") if m]
            overhead = overhead_table(mibs, args.steps, args.step_ms, Path(snaps)) if mibs else ""
        print(overhead, flush=True)
        broker = EmbeddedBroker(log_path=Path(tmp) / "tansu.log")
        broker.start()
        try:
            for n in (int(h) for h in args.hosts.split(",") if h):
                work = Path(tmp) / f"hosts{n}"
                work.mkdir()
                try:
                    jobs[n] = run_job(n, broker.bootstrap, work, args.stall_s, args.faults.split(","), rows,
                                      gap_s=args.gap_s)
                except Exception as exc:  # the other host counts still run; the failure is reported
                    failed.append(f"{n} hosts: {type(exc).__name__}: {str(exc)[:300]}")
                except KeyboardInterrupt:  # out of time: report what was measured
                    failed.append(f"{n} hosts: interrupted (what it measured is above)")
                    break
                print(table([r for r in rows if r["hosts"] == n]), flush=True)
        finally:
            broker.stop()
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[:3]
    goals = {"crash": 10, "xid": 10, "hang": 20}
    met = [f"{r['fault']} {s(r['total_s'])} s (goal {goals[r['fault']]}: {'met' if (r['total_s'] or 1e9) <= goals[r['fault']] else 'NOT met'}), "
           f"{r['steps_lost']} lost" for r in rows if r["hosts"] == 3]  # fmt: skip
    body = "\n\n".join(x for x in [
        machine_info() + f"; load average after the live jobs {', '.join(load)}",
        f"`python bench/recovery_time.py --hosts {args.hosts} --faults {args.faults} --stall-s {args.stall_s:g} "
        f"--gap-s {args.gap_s:g} --mib '{args.mib}' --step-ms {args.step_ms:g}`: per host count one job (`vigil run "
        "--nodes N:N` agents + 1 spare, 1 rank each, snap_worker.py: gloo, a snapshot every step replicated to the "
        "buddy, a checkpoint every 10 steps, 50 ms steps); h1 crashes, then hangs, then loses its GPU (Xid 79), each "
        f"fault armed {args.gap_s:g} s after the previous was recovered (the first from step 15). Detection is this "
        f"script's stand-in for the analyzer (exit / Xid line on Kafka; no step for {args.stall_s:g} s), timed from "
        "the worker's onset; launch = start commands -> the slowest rank's restore, less the load.",
        table(rows), "Snapshot memory held per host at the end (tiny model, K=2):", memory_table(jobs),
        overhead and "Snapshot cost at real state sizes (bench/snapshot.py's leg on this machine's CPU, one process):",
        overhead, "Goals at 3 hosts: " + "; ".join(met), failed and "Failed: " + "; ".join(failed),
    ] if x)  # fmt: skip
    print("\n" + body)
    if args.append:
        append_results("recovery_time.py (issue 24: in-memory snapshots)", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
