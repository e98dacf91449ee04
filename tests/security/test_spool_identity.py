"""A training job forging spool lines through a real `vigil run` agent and the real broker.

The child writes, next to one honest step line, a `command` and a `member` (facts and
decisions it may not make), a step naming another job and one naming another host: the agent refuses and counts each by
reason and only the honest line reaches the topics. The child's environment holds no vigil
credential.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events, step_line
from vigil.collector.control.childenv import child_environment
from vigil.collector.spoolguard import Refusal, SpoolGuard
from vigil.contract import StepTiming, validate_event
from vigil.contract.registry import spec_for
from vigil.settings import VigilSettings

CHILD = textwrap.dedent("""
    import json, os, pathlib, sys
    lines = json.loads(sys.argv[1])
    spool = pathlib.Path(os.environ["VIGIL_SPOOL_DIR"])
    spool.mkdir(parents=True, exist_ok=True)
    (spool / "forged.000000.jsonl").write_text("".join(json.dumps(d) + "\\n" for d in lines))
    print("vigil env:", sorted(k for k in os.environ if k.startswith("VIGIL_")), flush=True)
    print("extra leaked" if "s3cret" in repr(dict(os.environ)) else "no secret", flush=True)
""")


def forged_lines(job: str, host: str) -> list[dict[str, object]]:
    # well-formed decisions (a forged stop of every generation, a member naming the rendezvous address): refused by
    # kind; a command carrying argv, or a member dated hours ahead, is refused earlier, by the contract (malformed)
    command = {**spec_for("command").example, "kind": "command", "schema_version": 1, "job_id": "job-b",
               "host": "node-b", "action": "stop", "generation": 4_000_000_000, "world": None}
    member = {**spec_for("member").example, "kind": "member", "schema_version": 1, "job_id": job, "host": host,
              "ts": time.time() + 60}
    return [
        step_line(job=job, host=host, rank=0, step=7),
        command,
        member,
        step_line(job="job-b", host=host, rank=0, step=8),
        step_line(job=job, host="node-b", rank=0, step=9),
    ]


@pytest.mark.kafka
def test_forged_spool_lines_are_refused_counted_and_never_shipped(
    topics: VigilSettings, broker_bootstrap: str, tmp_path: Path
) -> None:
    env = agent_env(topics, broker_bootstrap, tmp_path / "home",
                    VIGIL_KAFKA_EXTRA=json.dumps({"client.id": "s3cret-agent"}))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, "-m", "vigil", "run", "--host", "node-a", "--job", "job-a", "--",
                           sys.executable, str(script), json.dumps(forged_lines("job-a", "node-a"))],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no secret" in done.stdout and "VIGIL_KAFKA_EXTRA" not in done.stdout
    assert "'VIGIL_SPOOL_DIR'" in done.stdout and "'VIGIL_JOB_ID'" in done.stdout
    assert "refused 4 spool lines from the training side: {'kind': 2, 'job': 1, 'host': 1}" in done.stderr
    events = read_events(topics, broker_bootstrap, ["steps", "commands", "recovery"])
    steps = [e for e in events if isinstance(e, StepTiming)]
    assert [(e.job_id, e.host, e.step) for e in steps] == [("job-a", "node-a", 7)]
    assert [e.kind for e in events if not isinstance(e, StepTiming)] == []


@pytest.mark.pure
def test_a_daemonset_guard_serves_every_job_of_its_host_only() -> None:
    guard = SpoolGuard(host="node-a", job_id=None)
    admitted = [guard.admit(validate_event("step", line, 1), "t") for line in
                (step_line(job="job-a", host="node-a", rank=0, step=1),
                 step_line(job="job-c", host="node-a", rank=0, step=1),
                 step_line(job="job-a", host="node-b", rank=0, step=1))]
    assert admitted == [True, True, False]
    assert guard.counts() == {Refusal.KIND: 0, Refusal.JOB: 0, Refusal.HOST: 1}


@pytest.mark.pure
def test_the_child_environment_keeps_the_training_side_and_drops_vigil_credentials() -> None:
    agent = {"PATH": "/bin", "NCCL_DEBUG": "INFO", "VIGIL_KAFKA_EXTRA": '{"sasl.password": "x"}',
             "VIGIL_CLICKHOUSE_DSN": "http://u:p@h:8123", "VIGIL_SIGNING_KEY_FILE": "/keys/k",
             "VIGIL_HANG_TIMEOUT_S": "60", "VIGIL_TIMER": "1", "VIGIL_JOB_ID": "stale"}
    env = child_environment(agent, {"VIGIL_JOB_ID": "job-a", "VIGIL_SPOOL_DIR": "/s"})
    assert env == {"PATH": "/bin", "NCCL_DEBUG": "INFO", "VIGIL_HANG_TIMEOUT_S": "60", "VIGIL_TIMER": "1",
                   "VIGIL_JOB_ID": "job-a", "VIGIL_SPOOL_DIR": "/s"}
