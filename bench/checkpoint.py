"""Two-phase checkpointing: time training is blocked per save, persist time, restore reads.

For each leg (state size per rank x ranks, real processes, gloo) on one local disk:

* synchronous baselines, each rank blocked until done: ``torch.save`` of the whole state by
  rank 0 (the usual DDP idiom; the others wait at a barrier) and ``dcp.save`` (every rank
  writes its share, files fsynced);
* the `Checkpointer`: `save()` blocked time, first save (allocates the staging buffers)
  and the median of the later ones; persist time (save() until committed, fsynced);
* restore with `load_latest`: one reader per DP group (``dp_group="world"``: rank 0 reads,
  broadcasts over gloo) against every rank reading (``dp_group=None``), with the page
  cache of the checkpoint's files dropped first (``posix_fadvise(DONTNEED)``), counting
  what each rank reads from storage through an instrumented reader.

The state is replicated across ranks (plain data parallelism), in 16 float32 tensors.
Blocked figures are the slowest rank's. The page cache is flushed (``os.sync``) between
phases. Goals: steady-state blocked time <= 10% of the synchronous save; restore reads =
one reader per DP group.

    python bench/checkpoint.py [--legs 100x4,500x4,2048x2] [--saves 4] [--dir DIR] [--no-append]

``--digest 100,500`` measures instead, in one process, what the commit marker's sha256
digests cost: hashing every file at commit (rank 0, part of the persist time) and verifying
them before a restore, against the whole persist time of the same save.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TENSORS = 16
MIB = 1 << 20


# ---- one rank ---------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer

    class CountingReader(FileSystemReader):
        read_bytes = 0
        opened = 0

        def __init__(self, path: str) -> None:
            super().__init__(path)
            CountingReader.opened += 1

        def read_data(self, plan: Any, planner: Any) -> Any:
            CountingReader.read_bytes += sum(
                int(self.storage_data[i.storage_index].length) for i in plan.items
            )
            return super().read_data(plan, planner)

    rank, world, work = args.rank, args.world, Path(args.dir)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=600))  # fmt: skip
    numel = args.size_mib * MIB // 4 // TENSORS
    g = torch.Generator().manual_seed(0)
    model = {f"layer{i}.weight": torch.randn(numel, generator=g) for i in range(TENSORS)}
    state: dict[str, Any] = {"model": model, "meta": {"step": 0}}
    out: dict[str, Any] = {"rank": rank}

    def together() -> None:
        if rank == 0:
            os.sync()  # no dirty pages of the previous phase left to write back
        dist.barrier()

    def timed(fn: Any) -> float:
        together()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def torch_save() -> None:
        if rank == 0:
            torch.save(state, work / "torch-save.pt")
        dist.barrier()

    out["torch_save_s"] = timed(torch_save)
    out["dcp_save_s"] = timed(lambda: dcp_save(state, checkpoint_id=str(work / "dcp-save")))

    ckpt = Checkpointer(CheckpointConfig(directory=work / "ckpt", keep=2, dp_group="world", events=False,
                                         collective_timeout_s=600, storage_reader_factory=CountingReader))  # fmt: skip
    blocked, copy, persist = [], [], []
    for n in range(args.saves):
        together()
        t0 = time.perf_counter()
        assert ckpt.save(n + 1, state)
        blocked.append(time.perf_counter() - t0)
        copy.append(ckpt.stats().last_copy_s)
        assert ckpt.wait(3600)
        persist.append(time.perf_counter() - t0)
    assert ckpt.stats().failed == 0, ckpt.last_error
    out.update(blocked_s=blocked, copy_s=copy, persist_s=persist)

    checksum = sum(float(t.sum()) for t in model.values())
    for mode, dp_group in (("one_reader", "world"), ("every_rank", None)):
        restorer = ckpt if dp_group == "world" else Checkpointer(
            CheckpointConfig(directory=work / "ckpt", events=False, collective_timeout_s=600,
                             storage_reader_factory=CountingReader))  # fmt: skip
        for t in model.values():
            t.zero_()
        latest = restorer.latest()
        if rank == 0 and latest is not None:
            for f in Path(latest.path).iterdir():
                fd = os.open(f, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold reads from the disk
                os.close(fd)
        CountingReader.read_bytes = CountingReader.opened = 0
        seconds = timed(lambda r=restorer: r.load_latest(state))
        ok = abs(sum(float(t.sum()) for t in model.values()) - checksum) < 1e-3 * max(1.0, abs(checksum))
        out[mode] = {
            "s": seconds,
            "bytes": CountingReader.read_bytes,
            "opened": CountingReader.opened,
            "ok": ok,
        }
        if restorer is not ckpt:
            restorer.close()
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()
    (work / f"result-{rank}.json").write_text(json.dumps(out))


# ---- orchestration ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_leg(size_mib: int, world: int, saves: int, base: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"ckpt-{size_mib}x{world}-", dir=base))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    port = str(free_port())
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", "--rank", str(r), "--world", str(world), "--port", port,
                          "--size-mib", str(size_mib), "--saves", str(saves), "--dir", str(work)], env=env)
        for r in range(world)
    ]  # fmt: skip
    codes = [p.wait() for p in procs]
    if codes != [0] * world:
        raise SystemExit(f"leg {size_mib} MiB x {world}: ranks exited {codes}")
    results = [json.loads((work / f"result-{r}.json").read_text()) for r in range(world)]
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return summarise(size_mib, world, results)


def summarise(size_mib: int, world: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    def slowest(key: str) -> float:
        return max(float(r[key]) for r in results)

    saves = len(results[0]["blocked_s"])
    blocked = [max(r["blocked_s"][i] for r in results) for i in range(saves)]
    persist = [max(r["persist_s"][i] for r in results) for i in range(saves)]
    copy = [max(r["copy_s"][i] for r in results) for i in range(saves)]
    steady = statistics.median(blocked[1:]) if saves > 1 else blocked[0]
    steady_copy = statistics.median(copy[1:]) if saves > 1 else copy[0]
    first_copy = copy[0]
    restore = {
        mode: {
            "s": max(r[mode]["s"] for r in results),
            "bytes": sum(r[mode]["bytes"] for r in results),
            "readers": sum(1 for r in results if r[mode]["opened"]),
            "ok": all(r[mode]["ok"] for r in results),
        }
        for mode in ("one_reader", "every_rank")
    }
    return {
        "size_mib": size_mib, "world": world, "torch_save_s": slowest("torch_save_s"),
        "dcp_save_s": slowest("dcp_save_s"), "first_blocked_s": blocked[0], "steady_blocked_s": steady,
        "steady_copy_s": steady_copy, "first_copy_s": first_copy,
        "steady_persist_s": statistics.median(persist[1:]) if saves > 1 else persist[0], "restore": restore,
    }  # fmt: skip


def render(legs: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    def mib(b: int) -> str:
        return f"{b / MIB:,.0f} MiB"

    lines = [
        "| state/rank x ranks | torch.save (rank 0) s | dcp.save s | Checkpointer blocked: 1st save (copy) s | "
        "later saves (median) s | of which the copy s | blocked / dcp.save | blocked / torch.save | persist s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for leg in legs:
        lines.append(
            f"| {leg['size_mib']} MiB x {leg['world']} | {leg['torch_save_s']:.3f} | {leg['dcp_save_s']:.3f} | "
            f"{leg['first_blocked_s']:.3f} ({leg['first_copy_s']:.3f}) | {leg['steady_blocked_s']:.3f} | {leg['steady_copy_s']:.3f} | "
            f"{100 * leg['steady_blocked_s'] / leg['dcp_save_s']:.1f}% | "
            f"{100 * leg['steady_blocked_s'] / leg['torch_save_s']:.1f}% | {leg['steady_persist_s']:.2f} |"
        )
    lines += [
        "",
        "| state/rank x ranks | restore, one reader per DP group: s | ranks reading | bytes read | "
        "restore, every rank reads: s | ranks reading | bytes read | state equal |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for leg in legs:
        one, every = leg["restore"]["one_reader"], leg["restore"]["every_rank"]
        lines.append(
            f"| {leg['size_mib']} MiB x {leg['world']} | {one['s']:.2f} | {one['readers']} | {mib(one['bytes'])} | "
            f"{every['s']:.2f} | {every['readers']} | {mib(every['bytes'])} | "
            f"{'yes' if one['ok'] and every['ok'] else 'NO'} |"
        )
    verdicts = []
    for leg in legs:
        ratio = leg["steady_blocked_s"] / leg["dcp_save_s"]
        one = leg["restore"]["one_reader"]
        verdicts.append(
            f"{leg['size_mib']} MiB x {leg['world']}: blocked {100 * ratio:.1f}% of dcp.save "
            f"(goal <= 10%: {'met' if ratio <= 0.10 else 'MISSED'}); restore readers {one['readers']} "
            f"for 1 DP group (goal 1: {'met' if one['readers'] == 1 else 'MISSED'})"
        )
    return lines, verdicts


def digest_cost(sizes: list[int], base: Path) -> list[str]:
    """Rows: state MiB, persist s (save() until committed), hashing at commit s, verify s, MiB/s."""
    import torch

    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer

    rows = ["| state | persist s (incl. digests) | digests at commit s | verify before restore s | hash MiB/s |",
            "|---|---:|---:|---:|---:|"]
    for size in sizes:
        directory = Path(tempfile.mkdtemp(prefix="digest-", dir=base))
        state = {f"t{i}": torch.rand(size * MIB // 4 // TENSORS) for i in range(TENSORS)}
        with Checkpointer(CheckpointConfig(directory=directory, events=False)) as ckpt:
            t0 = time.perf_counter()
            assert ckpt.save(1, state) and ckpt.wait(600), ckpt.last_error
            persist = time.perf_counter() - t0
            commit = ckpt.latest()
            assert commit is not None
            os.sync()
            t0 = time.perf_counter()
            ckpt.layout.digests(commit.name)
            hashing = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert ckpt.layout.verify(commit) == ""
            verify = time.perf_counter() - t0
        subprocess.run(["rm", "-rf", str(directory)], check=False)
        rows.append(f"| {size} MiB | {persist:.2f} | {hashing:.2f} | {verify:.2f} | {size / hashing:,.0f} |")
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--legs", default="100x4,500x4,2048x2", help="MiB per rank x ranks, comma separated")
    ap.add_argument("--saves", type=int, default=4, help="Checkpointer saves per leg (the first is cold)")
    ap.add_argument("--dir", default=None, help="where checkpoints go (default: a temporary directory)")
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--digest", default=None, metavar="MIB,...", help="measure the commit digests' cost only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--size-mib", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    base = Path(args.dir or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    if args.digest:
        rows = digest_cost([int(x) for x in args.digest.split(",")], base)
        if not args.no_append:
            with RESULTS.open("a", encoding="utf-8") as fh:
                fh.write(f"\n## checkpoint.py --digest — {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n\n"
                         f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs; load average at start {load}; one "
                         f"process, local disk under `{base}`, {TENSORS} float32 tensors. The commit marker's sha256 "
                         "of every file: computed by rank 0 before the marker (inside persist time, never blocking "
                         "training) and re-computed before a restore (page cache warm after the save).\n\n"
                         + "\n".join(rows) + "\n")
        return 0
    legs = []
    for spec in args.legs.split(","):
        size, world = (int(x) for x in spec.lower().split("x"))
        print(f"leg {size} MiB x {world} ranks ...", flush=True)
        legs.append(run_leg(size, world, args.saves, base))
    lines, verdicts = render(legs)
    print("\n".join([*lines, "", *verdicts]))
    if not args.no_append:
        import torch

        pinned = ("pinned: CUDA is available, " + torch.cuda.get_device_name()) if torch.cuda.is_available() \
            else "no pinned memory: no GPU"
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
        header = (
            f"\n## checkpoint.py — {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n\n"
            f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, {platform.platform()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}; load average at start {load}. "
            f"Checkpoints on the local disk under `{base}`; gloo over loopback; CPU tensors (staging is a "
            f"copy into reused host buffers, {pinned}). {args.saves} Checkpointer saves per leg. "
            "The 2 GiB leg runs 2 ranks to stay well under the machine's memory.\n\n"
        )
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(header + "\n".join(lines) + "\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
