"""The resource advisor over a simulated job's history stored in the real ClickHouse engine.

The job ran at 1..6 nodes (2 ranks each, throughput linear up to 4 nodes, flat after), then
on 6 nodes one host was slow at compute, one waited for data and one burned CPU: what
`vigil advise` says comes from what the analyzer's ingest stored.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.analyzer.advisor_sim import RANKS_PER_NODE, TOKENS_PER_RANK, knee_of
from vigil.analyzer.advisor.query import recommend
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.cli import advise as cli
from vigil.clickhouse.client import connect
from vigil.contract import Event, Heartbeat, StepTiming
from vigil.contract.telemetry import ProcessState

pytestmark = pytest.mark.clickhouse
JOB = "adv-job"
RATE = knee_of(4, 0.0)
SLOW, STARVED, BUSY = "h2", "h4", "h3"


def _history() -> list[Event]:
    t0 = datetime.now(UTC) - timedelta(hours=2)
    events: list[Event] = []
    step = 0
    for nodes in range(1, 7):
        world = nodes * RANKS_PER_NODE
        ms = world * TOKENS_PER_RANK / RATE(nodes) * 1000
        for _ in range(12):
            step += 1
            ts = t0 + timedelta(seconds=step)
            for rank in range(world):
                host = f"h{rank // RANKS_PER_NODE}"
                fwd = ms * 0.4 * (1.3 if nodes == 6 and host == SLOW else 1.0)
                data = ms * 0.1 * (4.0 if nodes == 6 and host == STARVED else 1.0)
                phases = {"data": data, "forward": fwd, "backward": ms * 0.4, "grad_sync": max(0.0, ms - data - fwd
                                                                                                   - ms * 0.4)}
                events.append(StepTiming(job_id=JOB, host=host, ts=ts, rank=rank, local_rank=rank % RANKS_PER_NODE,
                                         world_size=world, step=step, step_ms=ms, phases=phases,
                                         tokens=TOKENS_PER_RANK))
        if nodes == 6:
            for i in range(6):
                for k in range(5):
                    cpu = 390.0 if f"h{i}" == BUSY else 100.0 + i
                    events.append(Heartbeat(job_id=JOB, host=f"h{i}", ts=t0 + timedelta(seconds=step - 5 + k),
                                            processes=[ProcessState(pid=10 + r, status="running", local_rank=r,
                                                                    cpu_pct=cpu / 2, rss_mib=2048.0)
                                                       for r in range(RANKS_PER_NODE)]))
    return events


@pytest.fixture
def client(clickhouse_dsn: str, database: str) -> Any:
    c = connect(clickhouse_dsn, database=database)
    assert ClickHouseWriter(client=c).write(_history()) == []
    return c


def test_the_advisor_reads_the_knee_and_the_odd_hosts_from_stored_history(client: Any) -> None:
    rec = recommend(client, JOB)
    assert [p.nodes for p in rec.curve] == [1, 2, 3, 4, 5, 6]
    assert rec.nodes == 4 and rec.current == 6 and not rec.still_scaling
    assert rec.predicted == pytest.approx(RATE(4), rel=0.01)
    assert rec.hot == (SLOW, BUSY) and rec.starved == (STARVED,)
    assert rec.data_share is not None and 0.1 < rec.data_share < 0.2  # one host of 6 waits 4x
    text = cli.format_recommendation(rec)
    assert text.startswith(f"{JOB}: run on 4 nodes (now 6)") and "hot host h3: CPU 390 %" in text
    assert "hot host h2: compute" in text and "starved host h4" in text


def test_a_re_run_step_counts_once_and_the_range_bounds_the_answer(client: Any) -> None:
    again = [e for e in _history() if isinstance(e, StepTiming) and e.world_size == 12][:12]
    assert ClickHouseWriter(client=client).write([e.model_copy(update={"event_id": e.event_id[:-4] + "beef",
                                                                       "ts": e.ts + timedelta(minutes=30)})
                                                  for e in again]) == []
    rec = recommend(client, JOB, nodes_range=(1, 3))
    assert rec.nodes == 3 and rec.still_scaling
    six = recommend(client, JOB).curve[-1]
    assert six.nodes == 6 and six.throughput == pytest.approx(RATE(6), rel=0.01)  # not doubled by the re-run


def test_the_cli_prints_the_recommendation(client: Any, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from vigil.app.cli.main import build_parser
    from vigil.app.stack import access

    monkeypatch.setattr(access, "clickhouse_for_cli", lambda settings: client)
    args = build_parser().parse_args(["advise", "--job", JOB, "--nodes", "2:8", "--json"])
    assert args.handler(args) == 0
    assert '"nodes": 4' in capsys.readouterr().out
    args = build_parser().parse_args(["advise", "--job", "nobody"])
    assert args.handler(args) == 1 and "nobody: no recommendation yet" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["advise", "--job", JOB, "--nodes", "3:2"])


@pytest.mark.kafka
def test_published_advice_is_signed_cited_and_scored_by_what_ran_after_it(client: Any, topics: Any,
                                                                           broker_bootstrap: str) -> None:
    """`vigil advise --publish`: the advice goes to the recovery topic signed, the controller's gate admits it and
    refuses a forged one; once ingested and the job ran at the advised count, the next advice scores it."""
    from vigil.app.cli.advise import previous_score, publish
    from vigil.contract import Advice
    from vigil.contract.wire import decode_batch
    from vigil.kafka.reader import read_topics
    from vigil.recovery.controller.state import ClusterState
    from vigil.signing.gate import Gate
    from vigil.signing.policy import Refusals
    from vigil.signing.setup import verifier

    rec = recommend(client, JOB)
    assert previous_score(client, JOB) is None  # no advice stored yet
    publish(topics, rec, None)
    got = [e for r in read_topics(topics, broker_bootstrap, [topics.topic("recovery")], timeout=10)
           for e in decode_batch(r.value).events]
    (advice,) = [e for e in got if isinstance(e, Advice)]
    assert advice.nodes == 4 and advice.signature.startswith("operator/")
    assert [p.nodes for p in advice.curve] == [1, 2, 3, 4, 5, 6] and advice.hot == [SLOW, BUSY]
    gate = Gate(verifier=verifier(topics.home), refusals=Refusals(reporter="controller"))
    forged = advice.model_copy(update={"nodes": 6})
    accepted, _ = gate.admit([advice, forged], advice.ts)
    assert accepted == [advice]
    state = ClusterState()
    state.apply(accepted)
    assert state.job(JOB).advice == advice

    assert ClickHouseWriter(client=client).write([advice]) == []  # what the analyzer's ingest stores of it
    later = advice.ts + timedelta(seconds=1)
    ms = 4 * RANKS_PER_NODE * TOKENS_PER_RANK / (RATE(4) * 0.95) * 1000  # the job then ran 5 % below the prediction
    run = [StepTiming(job_id=JOB, host=f"h{r // RANKS_PER_NODE}", ts=min(later + timedelta(milliseconds=10 * i),
                                                                          datetime.now(UTC)),
                      rank=r, world_size=4 * RANKS_PER_NODE, step=1000 + i, step_ms=ms, phases={"forward": ms},
                      tokens=TOKENS_PER_RANK) for i in range(12) for r in range(4 * RANKS_PER_NODE)]
    assert ClickHouseWriter(client=client).write(run) == []
    scored = previous_score(client, JOB)
    assert scored is not None and scored.advice_id == advice.advice_id and scored.nodes == 4
    assert scored.predicted == pytest.approx(RATE(4), rel=0.01)
    assert scored.error_pct == pytest.approx(-5.0, abs=0.5)
    assert "(-5.0 %)" in cli.format_score(scored)
