"""A real 2-host PyTorch job with one slowed rank, end to end: `vigil run` agents -> broker -> live analyzer.

The demo's training script (gloo, CPU) runs as two torchrun nodes of one rank each, each
under its own `vigil run --host`. Rank 1 is slowed in its forward pass from step 20; rank 0
then waits for it in `grad_sync` every step. The live analyzer must flag the slow host,
never the host that waits for it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env
from tests.support.replay import as_live, key
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.clock import job_clocks
from vigil.analyzer.engine import replay
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract.registry import TELEMETRY_TOPICS
from vigil.kafka.broker import free_port
from vigil.kafka.lag import LagProbe
from vigil.service import StackContext
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow, pytest.mark.timeout(420)]
TRAIN = Path(__file__).resolve().parents[2] / "vigil" / "app" / "demo" / "train.py"
JOB, WAITING, SLOW = "torch-slow", "tnode-0", "tnode-1"


def _node(rank: int, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "vigil", "run", "--host", (WAITING, SLOW)[rank], "--job", JOB, "--",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank),
            "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port), str(TRAIN),
            "--steps", "70", "--dim", "64", "--layers", "1", "--seq", "32", "--slow-rank", "1", "--slow-from", "20",
            "--slow-ms", "150"]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_the_slow_host_is_flagged_and_the_host_waiting_for_it_is_not(
        topics: VigilSettings, clickhouse_dsn: str, database: str, tmp_path: Path) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    client = connect(clickhouse_dsn, database=database)
    ctx = StackContext(settings=topics, bootstrap=bootstrap, clickhouse=client, clickhouse_dsn=clickhouse_dsn)
    service = AnalyzerService(ctx, AnalyzerSettings(group_id=f"g-{database}", batch_s=0.3, detect_interval_s=0.5))
    service.start()
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        for rank in (0, 1):
            env = agent_env(topics, bootstrap, tmp_path / f"home{rank}", OMP_NUM_THREADS="1",
                            VIGIL_SPOOL_DIR=str(tmp_path / f"spool{rank}"))
            nodes.append(_node(rank, port, env, tmp_path / f"node{rank}.log"))
        for node in nodes:
            assert node.wait(timeout=300) == 0, (tmp_path / "node0.log").read_text()[-3000:]

        group = service.settings.group_id

        def judged_to_the_end() -> bool:
            """Everything the agents sent is stored, and the live cursor judged the stopped job's last instant (the
            straggler is judged every 8 s of event time: the last step's own instant may not be one of those)."""
            if not all(n == 0 for n in LagProbe(settings=topics, bootstrap=bootstrap, group_id=group,
                                                topics=TELEMETRY_TOPICS).sample().values()):
                return False
            (clock,) = job_clocks(client, job=JOB)  # no frontier: as a replay sees it, stopped
            pos = service.cursor.positions.get(JOB)
            return pos is not None and pos >= clock.until(service.settings.eval_step_s) and not service.cursor.backlog

        wait_until(judged_to_the_end, 120, "the analyzer judged the job to its end", every=0.5)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
        service.stop()  # joins the detector loop (whose turn publishes before it moves on) and flushes the producer
    alerts = [a for a in read_alert_events(topics, bootstrap) if a.job_id == JOB and a.severity != "info"]
    replayed = [a for a in replay(client, AnalyzerSettings(), JOB, stages=as_live()) if a.severity != "info"]
    # what it saw, for a failure: each window's compute and waiting per rank, and any detector error
    windows = client.query(
        "SELECT window, rank, phase, round(sum(sum_ms) / sum(n), 1) FROM phase_rank_windows WHERE job_id = "
        "{job:String} AND phase IN ('forward', 'grad_sync') GROUP BY window, rank, phase ORDER BY window, rank, phase",
        parameters={"job": JOB}).result_rows
    seen = (f"live: {[(a.fingerprint, a.summary) for a in alerts]}\nreplay: {[(a.fingerprint, a.summary) for a in replayed]}"
            f"\ndetector errors: {service.cursor.errors[-5:]}\nwindows (window, rank, phase, mean_ms): {windows}")
    assert {(a.alert, a.host) for a in alerts if a.status == "firing"} == {("straggler", SLOW)}, seen
    assert key(alerts) == key(replayed), seen  # live equals replay
    first = next(a for a in alerts if a.status == "firing")
    assert first.subject == f"{SLOW}/forward" and first.evidence["rank"] == 1
    assert first.evidence["others_wait_ms"] > 50  # rank 0 waits for it in grad_sync
