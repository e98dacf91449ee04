"""Cost of the node agent on one node: CPU % and RSS of `vigil collector` under a realistic load.

Load: 8 ranks x 1 step/s, each step record with 20 phases (written to the spool in the
timer's format and layout), 8 RDMA NICs in a fake sysfs tree whose counters advance
every second, heartbeats every 2 s, all shipped to a real (embedded) broker. After a
warm-up the agent's CPU time and RSS are sampled for `--duration` seconds; every step
record written must have reached Kafka. Results are appended to bench/RESULTS.md.

    python bench/agent_cost.py [--duration 60] [--ranks 8] [--phases 20] [--nics 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psutil

from vigil.contract.wire import decode_batch
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.reader import read_topics
from vigil.settings import VigilSettings

RESULTS = Path(__file__).with_name("RESULTS.md")


def write_nics(sysfs: Path, nics: int, t: int) -> None:
    for i in range(nics):
        c = sysfs / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1" / "counters"
        c.mkdir(parents=True, exist_ok=True)
        words = t * 5_000_000_000 // 4  # 5 GB/s each way
        (c / "port_xmit_data").write_text(f"{words}\n")
        (c / "port_rcv_data").write_text(f"{words}\n")


def step_record(rank: int, step: int, ranks: int, phases: int) -> str:
    doc = {"kind": "step", "schema_version": 1, "event_id": uuid.uuid4().hex, "job_id": "bench",
           "host": "bench-host", "ts": time.time(), "rank": rank, "local_rank": rank, "world_size": ranks,
           "coords": {"dp": rank, "tp": 0, "pp": 0}, "step": step, "step_ms": 1000.0, "tokens": 524288,
           "phases": {f"phase_{p:02d}": 1000.0 / phases for p in range(phases)}, "dropped": 0}
    return json.dumps(doc) + "\n"


def count_steps(settings: VigilSettings, bootstrap: str) -> int:
    n = 0
    for rec in read_topics(settings, bootstrap, [settings.topic("steps")], timeout=30):
        n += len(decode_batch(rec.value).events)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--phases", type=int, default=20)
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vigil-agent-cost-"))
    broker = EmbeddedBroker(log_path=work / "broker.log")
    bootstrap = broker.start()
    settings = VigilSettings(home=work / "home", kafka_bootstrap=bootstrap, topic_prefix="bench.", topic_partitions=2)
    sysfs, procfs, spool = work / "sysfs", work / "procfs", work / "spool"
    (procfs / "net").mkdir(parents=True)
    (procfs / "net" / "dev").write_text("h1\nh2\n    lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n")
    write_nics(sysfs, args.nics, 0)
    env = {**os.environ, "VIGIL_HOME": str(work / "home"), "VIGIL_KAFKA_BOOTSTRAP": bootstrap,
           "VIGIL_TOPIC_PREFIX": "bench.", "VIGIL_TOPIC_PARTITIONS": "2"}
    with open(work / "agent.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "vigil", "collector", "--host", "bench-host", "--job", "bench",
             "--spool-dir", str(spool), "--sysfs-root", str(sysfs), "--procfs-root", str(procfs)],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    proc = psutil.Process(agent.pid)
    files = [spool / "bench" / f"bench-host-rank{r}.000000.jsonl" for r in range(args.ranks)]
    files[0].parent.mkdir(parents=True, exist_ok=True)
    written = 0
    rss: list[float] = []
    cpu0 = wall0 = None
    start = time.monotonic()
    tick = 0
    try:
        while time.monotonic() - start < args.warmup + args.duration:
            tick += 1
            write_nics(sysfs, args.nics, tick)
            for r, f in enumerate(files):
                with open(f, "a") as fh:
                    fh.write(step_record(r, tick, args.ranks, args.phases))
                written += 1
            if cpu0 is None and time.monotonic() - start >= args.warmup:
                t = proc.cpu_times()
                cpu0, wall0 = t.user + t.system, time.monotonic()
            if cpu0 is not None:
                rss.append(proc.memory_info().rss / 2**20)
            time.sleep(max(0.0, start + tick - time.monotonic()))
        t = proc.cpu_times()
        assert cpu0 is not None and wall0 is not None
        cpu_pct = 100.0 * (t.user + t.system - cpu0) / (time.monotonic() - wall0)
        deadline = time.monotonic() + 60
        shipped = 0
        while time.monotonic() < deadline:
            shipped = count_steps(settings, bootstrap)
            if shipped >= written:
                break
            time.sleep(1)
    finally:
        agent.terminate()
        agent.wait(timeout=60)
        broker.stop()
    mean_rss, max_rss = sum(rss) / len(rss), max(rss)
    cpu_model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), platform.processor())
    section = "\n".join([
        f"## agent_cost.py — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: `{platform.node()}`, {psutil.cpu_count()} CPUs ({cpu_model}), {platform.platform()}, "
        f"Python {platform.python_version()}. Embedded broker on loopback.",
        f"Load: {args.ranks} ranks x 1 step/s x {args.phases} phases (timer spool files), {args.nics} RDMA NICs "
        f"(fake sysfs, sampled every 1 s), heartbeats every 2 s; measured {args.duration:.0f} s after "
        f"{args.warmup:.0f} s warm-up.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| agent CPU (% of one core) | {cpu_pct:.2f} |",
        f"| agent RSS mean / max (MiB) | {mean_rss:.1f} / {max_rss:.1f} |",
        f"| step records written / on Kafka | {written} / {shipped} |",
        "",
    ]) + "\n"
    print(section)
    if not args.no_append:
        with open(RESULTS, "a") as fh:
            fh.write("\n" + section)
    return 0 if shipped >= written else 1


if __name__ == "__main__":
    sys.exit(main())
