"""In-memory snapshots: what one every step costs the training loop, and what a restore from one costs.

One process (rank-local: a snapshot involves no collective), a state of `--mib` MiB in 16 float32
tensors, snapshots into a tmpfs directory (default under /dev/shm). For each simulated step time
(`--step-ms`, a sleep standing for the accelerator's work, during which the writer thread runs):

* blocked ms per `Checkpointer.snapshot()` call (median, p90, max): the copy into the reused host
  buffers (a snapshot whose predecessor is still being written is skipped: `snapshot_wait_s` 0);
* write ms per snapshot (torch.save into the tmpfs + sha256 + marker + prune, on the writer
  thread); snapshots written and skipped (the writer was still busy: the next fresh one is later);
* overhead per step = median blocked / step time;
* restore: `load_latest` from the newest snapshot (verify the digest, load, copy into the state);
* with `--budget B` (the checkpointer's `snapshot_budget`): a persisted save every `--save-at` steps
  lets the ranks choose the interval from the measured copy, write and step times; the amortized
  overhead is the snapshots' blocked time of the steps after the first save over their step time
  (the saves' own blocking is the persisted checkpoint's cost, not counted).

Then buddy replication (the node agent's side, `collector/control/replication.py`, same machine: hosts are
directories): push ms per snapshot to the buddy (read, sha256 while copying, atomic rename, prune),
staging ms per snapshot into a spare before it starts (the same copy, from a peer's memory), and
`load_latest` on the host holding the copy (source ``peer``).

    python bench/snapshot.py [--mib 50] [--steps 30] [--step-ms 100,500] [--budget none|0.03] [--save-at 5]
                             [--dir DIR] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TENSORS = 16


def leg(mib: int, steps: int, step_ms: float, base: Path, device: str = "cpu", budget: float | None = None,
        save_at: int = 0) -> dict[str, Any]:
    import torch

    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer

    numel = mib * (1 << 20) // 4 // TENSORS
    state: dict[str, Any] = {f"t{i}": torch.randn(numel, device=device) for i in range(TENSORS)}
    work = Path(tempfile.mkdtemp(prefix=f"snap-{step_ms:g}-", dir=base))
    cfg = CheckpointConfig(directory=work / "ckpt", snapshot_dir=work / "shm", events=False, snapshot_keep=2,
                           snapshot_budget=budget)
    blocked: list[float] = []
    taken: list[float] = []  # the calls that took one (the others were skipped: the writer was busy)
    with Checkpointer(cfg) as ckpt:
        for step in range(1, steps + 1):
            time.sleep(step_ms / 1000)
            for t in state.values():
                t.add_(1e-3)
            t0 = time.perf_counter()
            took = ckpt.snapshot(step, state)
            blocked.append((time.perf_counter() - t0) * 1e3)
            if took and step > 1:
                taken.append(blocked[-1])
            if save_at and step % save_at == 0:  # each persisted save's agreement sets the interval under the budget
                ckpt.snapshots.wait(60)
                ckpt.save(step, state)
                ckpt.wait(600)
        ckpt.snapshots.wait(60)
        stats = ckpt.stats()
        write_ms = ckpt.snapshots.write_s * 1e3 / max(1, stats.snapshots_written)
    t0 = time.perf_counter()
    with Checkpointer(cfg) as again:
        restored = again.load_latest(state)
    restore_s = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    later = sorted(blocked[1:])  # the first call allocates the staging buffers
    after = blocked[save_at:]  # the steps under an interval chosen at a save
    steady = blocked[2 * save_at:]  # under one chosen with the copies measured at the chosen interval
    return {"step_ms": step_ms, "first_ms": blocked[0], "median_ms": statistics.median(later),
            "p90_ms": later[int(0.9 * (len(later) - 1))], "max_ms": later[-1], "written": stats.snapshots_written,
            "skipped": stats.snapshots_skipped, "write_ms": write_ms, "restored": restored, "restore_s": restore_s,
            "overhead": statistics.median(later) / step_ms, "mean_overhead": statistics.mean(later) / step_ms,
            "taken_ms": statistics.median(taken) if taken else None, "every": stats.snapshot_every,
            "amortized": sum(after) / (len(after) * step_ms) if after else 0.0,
            "steady": sum(steady) / (len(steady) * step_ms) if steady else 0.0}  # fmt: skip


def peer_leg(mib: int, base: Path) -> dict[str, Any]:
    """h0's rank writes 2 snapshots; h0's agent pushes them to h1; a spare h2 stages them; h1 restores (peer)."""
    import torch

    from vigil.collector.control.buddies import LocalTransport
    from vigil.collector.control.replicas import HostStore
    from vigil.collector.control.replication import Replicator
    from vigil.contract import World
    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer

    numel = mib * (1 << 20) // 4 // TENSORS
    state: dict[str, Any] = {f"t{i}": torch.randn(numel) for i in range(TENSORS)}
    work = Path(tempfile.mkdtemp(prefix="snap-peer-", dir=base))

    def cfg(host: str) -> CheckpointConfig:
        return CheckpointConfig(directory=work / "ckpt", snapshot_dir=work / host / "job", events=False,
                                snapshot_keep=2, snapshot_wait_s=60)  # fmt: skip

    def store(host: str) -> HostStore:
        return HostStore(work / host / "job", keep=2, max_rank_bytes=8 << 30, max_host_bytes=64 << 30)

    with Checkpointer(cfg("h0")) as ckpt:
        for step in (1, 2):
            ckpt.snapshot(step, state)
            ckpt.snapshots.wait(60)
    world = World(generation=1, hosts=["h0", "h1"], node_rank=0, master_addr="127.0.0.1", master_port=1)
    rep = Replicator(store("h0"), LocalTransport(store_of=store), host="h0")
    rep.follow(world, 1)
    t0 = time.perf_counter()
    pushed = rep.tick()
    push_ms = (time.perf_counter() - t0) * 1e3 / max(1, pushed)
    spare = Replicator(store("h2"), LocalTransport(store_of=store), host="h2")
    t0 = time.perf_counter()
    staged = spare.stage(world.model_copy(update={"hosts": ["h2", "h1"]}), 1)
    stage_ms = (time.perf_counter() - t0) * 1e3 / max(1, staged)
    t0 = time.perf_counter()
    with Checkpointer(cfg("h1")) as again:
        restored = again.load_latest(state)
        source = again.last_restore.source if again.last_restore is not None else "-"
    return {"pushed": pushed, "push_ms": push_ms, "staged": staged, "stage_ms": stage_ms, "restored": restored,
            "source": source, "restore_s": time.perf_counter() - t0}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=50)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--step-ms", default="100,500")
    p.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir())
    p.add_argument("--device", default="cpu", help="where the state lives: cpu, or cuda (staged into pinned host "
                   "memory; the step's sleep leaves the GPU idle, so the blocked time is the copy itself)")
    p.add_argument("--budget", default="none", help="snapshot_budget: a share of step time (0.03), or none (one "
                   "every step); with a budget the interval is chosen at a save at --save-at")
    p.add_argument("--save-at", type=int, default=5)
    p.add_argument("--no-append", action="store_true")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="vigil-bench-snap-", dir=args.dir))
    budget = None if args.budget == "none" else float(args.budget)
    save_at = args.save_at if budget is not None else 0
    try:  # the legs fill a tmpfs (host memory): nothing of them may outlive the run
        rows = [leg(args.mib, args.steps, float(ms), base, args.device, budget, save_at)
                for ms in args.step_ms.split(",")]
        peer = peer_leg(args.mib, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## snapshot.py — {now}", "",
        f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs"
        f"{', GPU ' + torch.cuda.get_device_name() + ', torch ' + torch.__version__ if args.device != 'cpu' else ''}"
        f"; state on `{args.device}`; load average at start "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; one process, {args.mib} MiB of state in {TENSORS} float32 "
        f"tensors, snapshot() called every step into `{args.dir}` (tmpfs), K=2 kept; {args.steps} steps per leg, the step "
        "a sleep (the accelerator's time, during which the writer thread runs)"
        + (f"; snapshot_budget {budget}: a persisted save every {save_at} steps chooses the interval, the amortized "
           f"overhead is the snapshots' blocked time of steps {save_at + 1}.. over their step time (steady: from step "
           f"{2 * save_at + 1}, the second save on)" if budget is not None else
           "; a snapshot every step") + ".", "",
        "| step ms | first call ms | blocked ms median / p90 / max | overhead per step | write ms (thread) "
        "| written / skipped | restore from memory s | interval (steps) | amortized overhead / steady |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['step_ms']:g} | {r['first_ms']:.1f} | {r['median_ms']:.1f} / {r['p90_ms']:.1f} / "
                     f"{r['max_ms']:.1f} | {100 * r['overhead']:.1f}% | {r['write_ms']:.0f} | {r['written']} / {r['skipped']} "
                     f"| {r['restore_s']:.2f} | {r['every']} | {100 * r['amortized']:.1f}% / {100 * r['steady']:.1f}% |")  # fmt: skip
    lines += ["", "Buddy replication (agent side, one machine) and restore from the buddy's copy:", "",
              "| push ms per snapshot | stage ms per snapshot (spare) | pushed / staged | restore from the peer copy s "
              "| restored step (source) |", "|---:|---:|---:|---:|---|",
              f"| {peer['push_ms']:.0f} | {peer['stage_ms']:.0f} | {peer['pushed']} / {peer['staged']} | "
              f"{peer['restore_s']:.2f} | {peer['restored']} ({peer['source']}) |"]  # fmt: skip
    lines += ["", f"Command: `python bench/snapshot.py --mib {args.mib} --steps {args.steps} --step-ms {args.step_ms}"
              f"{' --device ' + args.device if args.device != 'cpu' else ''}"
              f"{f' --budget {budget} --save-at {save_at}' if budget is not None else ''}`.", ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_append:
        with RESULTS.open("a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
