"""Untrusted claims, through the real agent, controller and broker: each raises ONE `security` alert.

The attacker holds one training job (`vigil run` child): it floods its spool with forged
decisions and lines naming another job or host, tampers with one of its checkpoints and
restores (the real Checkpointer reports the digest mismatch), and produces `member` reports
dated a day ahead with a plain confluent-kafka producer. The agent refuses the spool lines and
raises one alert per reason, with the count; the controller folds none of the future members
(it starts a genuine probe job announced after them, never the forged one) and raises one alert
for them and one for the checkpoint that failed verification.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.agent_harness import step_line
from tests.support.live import Live
from vigil.collector.spoolguard import Refusal as SpoolRefusal
from vigil.collector.spoolguard import SpoolGuard
from vigil.contract import Alert, Checkpoint, Command, Member, encode_batch, validate_event
from vigil.contract.registry import spec_for
from vigil.contract.wire import decode_batch
from vigil.recovery.controller.claims import Claims
from vigil.signing import KeyStore, Role
from vigil.signing.policy import Refusals
from vigil.signing.seal import Ed25519Signer

CHILD = textwrap.dedent("""
    import json, os, pathlib, sys
    import torch
    from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer

    spool = pathlib.Path(os.environ["VIGIL_SPOOL_DIR"])
    spool.mkdir(parents=True, exist_ok=True)
    tmp = spool / "forged.tmp"  # written whole, then renamed: the agent reads the flood in one pass
    tmp.write_text("".join(json.dumps(d) + "\\n" for d in json.loads(sys.argv[1])))
    os.replace(tmp, spool / "forged.000000.jsonl")
    directory = pathlib.Path(sys.argv[2])
    w = torch.zeros(4)
    with Checkpointer(CheckpointConfig(directory=directory)) as ckpt:
        for step in (1, 2):
            w.fill_(step)
            assert ckpt.save(step, {"w": w}) and ckpt.wait(30), ckpt.last_error
    (newest,) = directory.glob("step-0000000002-*")
    shard = newest / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with Checkpointer(CheckpointConfig(directory=directory)) as ckpt:
        print("restored step", ckpt.load_latest({"w": w}), flush=True)
""")
FLOOD = 50


def forged_lines(job: str, host: str) -> list[dict[str, object]]:
    command = {**spec_for("command").example, "kind": "command", "schema_version": 1, "job_id": job, "host": host,
               "action": "stop", "world": None}
    return [*({**command, "command_id": f"forged-{i}", "event_id": f"forged-{i:04d}"} for i in range(FLOOD)),
            step_line(job="job-b", host=host, rank=0, step=8), step_line(job="job-b", host=host, rank=0, step=9),
            step_line(job=job, host="node-b", rank=0, step=10)]


def member_doc(job: str, host: str, ts: float, n: int) -> dict[str, object]:
    return {"event_id": f"member-{job}-{n:04d}", "job_id": job, "host": host, "ts": ts, "state": "waiting",
            "nodes_min": 1, "nodes_max": 1, "ip": "127.0.0.1", "ports": [29500]}


def security(live: Live, reporter: str) -> dict[str, list[Alert]]:
    out: dict[str, list[Alert]] = {}
    for e in live.events:
        if isinstance(e, Alert) and e.alert == "security" and e.evidence.get("reporter") == reporter:
            out.setdefault(e.subject, []).append(e)
    return out


@pytest.mark.kafka
def test_forged_spool_tampered_checkpoint_and_future_members_each_raise_one_alert(live: Live, tmp_path: Path) -> None:
    live.start_controller()
    p = Producer({"bootstrap.servers": live.bootstrap})
    ahead = time.time() + 86_400
    for n in range(20):  # a flood of future-dated members, a plain producer, no key
        doc = {"kind": "member", "schema_version": 1, "events": [member_doc("forged-job", "node-x", ahead, n)]}
        p.produce(live.settings.topic("recovery"), value=json.dumps(doc).encode(), key=b"node-x")
    store = KeyStore(live.home / "keys")  # the genuine probe is attested by its host's own key
    probe = Ed25519Signer(role=Role.AGENT, key_id=store.issue("node-p"), key=store.private_key(Role.AGENT, "node-p")[1]
                          ).seal(Member(job_id="probe-job", host="node-p", state="waiting", nodes_min=1, nodes_max=1,
                                        ip="127.0.0.1", ports=[29500]))
    p.produce(live.settings.topic("recovery"), value=encode_batch([probe]), key=b"node-p")
    assert p.flush(15) == 0
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, "-m", "vigil", "run", "--host", "node-a", "--job", "job-a", "--",
                           sys.executable, str(script), json.dumps(forged_lines("job-a", "node-a")),
                           str(tmp_path / "ckpt")], env=live.env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "restored step 1" in done.stdout

    live.wait_for(lambda _s: any(isinstance(e, Command) and e.job_id == "probe-job" for e in live.events), 120,
                  "the controller to start the genuine probe job, announced after the forged members")
    live.wait_for(lambda _s: {"member", "checkpoint"} <= set(security(live, "controller")), 60,
                  "the controller's security alerts")
    live.wait_for(lambda _s: len(security(live, "agent:node-a")) == 3, 60, "the agent's security alerts")
    spool = security(live, "agent:node-a")
    assert sorted(spool) == ["spool/host", "spool/job", "spool/kind"]
    assert all(len(a) == 1 for a in spool.values())  # a flood is one alert per reason ...
    assert spool["spool/kind"][0].evidence["count"] == FLOOD  # ... that says how many lines it refused
    assert spool["spool/job"][0].evidence["count"] == 2 and spool["spool/job"][0].job_id == "job-a"
    assert spool["spool/kind"][0].severity == "critical"
    controller = security(live, "controller")
    assert sorted(controller) == ["checkpoint", "member"]
    (member,) = controller["member"]
    assert (member.job_id, member.host, member.evidence["problem"]) == ("forged-job", "node-x", "dated ahead")
    (ckpt,) = controller["checkpoint"]
    assert (ckpt.job_id, ckpt.host, ckpt.evidence["problem"]) == ("job-a", "node-a", "checkpoint failed verification")
    assert ckpt.evidence["detail"].startswith("step 2 ")
    # nothing acted: no command of the forged job or host, none of the spool's forged commands reached a topic
    assert not [e for e in live.events if isinstance(e, Command) and (e.job_id, e.host) != ("probe-job", "node-p")]
    assert [e.step for e in live.events if isinstance(e, Checkpoint) and e.unverified] == [2]


@pytest.mark.pure
def test_a_flood_of_one_reason_is_one_alert_with_its_count() -> None:
    guard = SpoolGuard(host="node-a", job_id="job-a")
    lines = [step_line(job="job-a", host="node-b", rank=0, step=i) for i in range(7)]
    assert not [line for line in lines if guard.admit(validate_event("step", line, 1), "f")]
    (alert,) = guard.drain()
    assert (alert.subject, alert.fingerprint, alert.evidence["count"]) == (
        "spool/host", "security/agent:node-a/spool/host/job-a", 7)
    guard.admit(validate_event("step", lines[0], 1), "f")
    assert guard.drain() == [] and guard.counts()[SpoolRefusal.HOST] == 8


@pytest.mark.pure
def test_future_members_are_one_alert_per_job_and_host_malformed_ones_none() -> None:
    ahead = (datetime.now(UTC) + timedelta(days=1)).timestamp()
    docs = [member_doc("job-f", "node-x", ahead, 1), member_doc("job-f", "node-x", ahead, 2),
            member_doc("job-f", "node-y", ahead, 3),
            member_doc("job-\x1b[31m", "node-x", ahead, 4),  # malformed too: dead-lettered, not a claim to raise
            {**member_doc("job-f", "node-z", ahead, 5), "nodes_min": -1}]
    decoded = decode_batch(json.dumps({"kind": "member", "schema_version": 1, "events": docs}).encode())
    assert decoded.events == [] and [r.ahead for r in decoded.rejected] == [True, True, True, False, False]
    claims = Claims(refusals=Refusals(reporter="controller"))
    alerts = claims.review([], decoded.rejected, datetime.now(UTC))
    assert [(a.job_id, a.host, a.subject) for a in alerts] == [("job-f", "node-x", "member"),
                                                               ("job-f", "node-y", "member")]
    assert claims.refusals.count == 3
