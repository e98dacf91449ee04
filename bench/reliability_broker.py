"""Reliability: the broker down for a minute under a real training job (issue 23's "broker down 60 s" row).

A real 2-host job (tests/chaos/chaos_worker.py: DDP over gloo, `StepTimer`, under two `vigil run
--nodes 2:2` agents and a `vigil recovery run` controller) trains while the analyzer ingests. The
embedded broker is then SIGSTOPped for `--down-s` seconds: every client sees an unreachable broker
(the embedded Tansu keeps its log in memory only, so a restart would lose the log; a real Kafka
keeps it). Training goes on and the agents keep writing and holding their spooled records. At
SIGCONT the job is told to end; the row's time to recover is SIGCONT -> every agent exited (the job
finished) and the analyzer's lag is 0 against the partitions' confirmed ends. Then the analyzer
stops and the step events are counted: offered = written by the ranks (their spool, by event id),
stored, lost (never stored, must be 0), duplicated (must be 0); peak RSS = the agents' largest.

    python bench/reliability_broker.py [--down-s 60] [--no-append]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer_common import append_results, machine_info  # noqa: E402

from tests.support.live import Live  # noqa: E402
from tests.support.services import analyzer_service, chaos_job, spooled_steps, stored_steps  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402
from vigil.analyzer.ingest.loop import INGEST_TOPICS  # noqa: E402
from vigil.kafka.admin import ensure_topics  # noqa: E402
from vigil.kafka.broker import EmbeddedBroker  # noqa: E402
from vigil.kafka.lag import LagProbe  # noqa: E402
from vigil.settings import VigilSettings  # noqa: E402

JOB, HOSTS = "rel-broker", ("h0", "h1")


def peak_kib(pids: list[int]) -> int:
    best = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    best = max(best, int(line.split()[1]))
        except OSError:
            pass
    return best


def run(tmp: Path, down_s: float) -> str:
    broker = EmbeddedBroker(log_path=tmp / "tansu.log")
    broker.start()
    assert broker.pid is not None
    settings = VigilSettings(home=tmp / "home", kafka_bootstrap=broker.bootstrap,
                             topic_prefix=f"r{uuid.uuid4().hex[:8]}.", topic_partitions=2)
    ensure_topics(settings, broker.bootstrap)
    live = Live(settings=settings, bootstrap=broker.bootstrap, tmp=tmp, recovery_env={})
    analyzer, dsn = analyzer_service(live.env, tmp)
    command, stop = chaos_job(tmp)
    spool = settings.home / "spool"
    try:
        analyzer.start()
        wait_until(analyzer.ready, 300, "the analyzer to run")
        live.start_job(JOB, HOSTS, command, nodes="2:2", timeout=300)
        before = len(spooled_steps(spool))
        os.kill(broker.pid, signal.SIGSTOP)
        peak, t_down = 0, time.monotonic()
        while time.monotonic() - t_down < down_s:
            peak = max(peak, peak_kib([p.pid for p in live.agents.values()]))
            time.sleep(1.0)
        during = len(spooled_steps(spool)) - before
        os.kill(broker.pid, signal.SIGCONT)
        t_up = time.monotonic()
        stop.touch()
        probe = LagProbe(settings=settings, bootstrap=broker.bootstrap, group_id="vigil-analyzer", topics=INGEST_TOPICS)
        wait_until(lambda: all(p.poll() is not None for p in live.agents.values())
                   and all(n == 0 for n in probe.sample().values()), 600, "the job to end and the analyzer to catch up")
        recover = time.monotonic() - t_up
        codes = {h: p.returncode for h, p in live.agents.items()}
        analyzer.stop()
        written = spooled_steps(spool)
        stored = stored_steps(dsn, analyzer.env)
        lost = len(set(written) - stored.keys())
        dup = sum(n - 1 for i, n in stored.items() if i in set(written) and n > 1)
        return (f"| broker SIGSTOPped {down_s:.0f} s under a real 2-host job ({during} step events written while it was "
                f"down; agents exited {sorted(set(codes.values()))}) | {len(written):,} | "
                f"{len(set(written) & stored.keys()):,} | 0 | {lost} | {dup} | {recover:.1f} s (SIGCONT -> job ended, "
                f"analyzer lag 0) | {peak / 1024:.0f} MiB (agent) |")
    finally:
        live.close()
        analyzer.stop()
        os.kill(broker.pid, signal.SIGCONT)
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--down-s", type=float, default=60.0)
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vigil-relbroker-") as d:
        row = run(Path(d), args.down_s)
    table = ("| fault | events offered | stored | dead-lettered | lost | duplicated | time to recover | peak RSS |\n"
             "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + row)
    print(table, flush=True)
    if not args.no_append:
        append_results("Reliability: the broker down (bench/reliability_broker.py)",
                       f"{table}\n\n{machine_info()}\n\nReproduce: `python bench/reliability_broker.py "
                       f"--down-s {args.down_s:.0f}`.")


if __name__ == "__main__":
    main()
