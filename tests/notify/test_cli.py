"""`vigil notify test RECEIVER` against a loopback receiver, and `vigil silence add | list | expire` through the
real broker's silences topic, run in-process through the CLI's entry point."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.notifier import SECRET
from tests.support.receiver import Receiver, signed_by
from vigil.app.cli.main import main
from vigil.settings import VigilSettings


@pytest.mark.pure
def test_notify_test_sends_one_signed_test_notification(receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VIGIL_NOTIFY_WEBHOOK_URL", receiver.url + "?token=t0k3n")
    monkeypatch.setenv("VIGIL_NOTIFY_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("VIGIL_NOTIFY_DASHBOARD_URL", "https://vigil.example")
    assert main(["notify", "test", "webhook"]) == 0
    (req,) = receiver.all()
    doc = req.json()
    assert (doc["reason"], doc["status"], doc["job_id"], doc["schema"]) == ("test", "firing", "vigil-test",
                                                                           "vigil.notification")
    assert signed_by(SECRET.encode(), req) and req.key == doc["key"]
    assert doc["links"]["alerts"] == "https://vigil.example/alerts?job=vigil-test"
    assert f"key {doc['key']}" in capsys.readouterr().out

    receiver.status = 400
    assert main(["notify", "test", "webhook"]) == 2
    err = capsys.readouterr().err
    assert "HTTP 400" in err and "not retryable" in err and err.count("\n") == 1 and "t0k3n" not in err
    assert main(["notify", "test", "nobody"]) == 2
    assert "no receiver named 'nobody'; configured: webhook" in capsys.readouterr().err


@pytest.mark.kafka
def test_silence_add_list_expire_through_the_topic(topics: VigilSettings, clickhouse_dsn: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for k, v in {"VIGIL_HOME": str(topics.home), "VIGIL_KAFKA_BOOTSTRAP": str(topics.kafka_bootstrap),
                 "VIGIL_TOPIC_PREFIX": topics.topic_prefix, "VIGIL_CLICKHOUSE_DSN": clickhouse_dsn}.items():
        monkeypatch.setenv(k, v)

    def listing(*flags: str) -> list[dict[str, Any]]:
        assert main(["silence", "list", "--json", *flags]) == 0
        return list(json.loads(capsys.readouterr().out))

    assert main(["silence", "add", "--match", "job=llama-*,kind=straggler", "--match", "host=node-07", "--for", "2h",
                 "--reason", "draining node-07", "--by", "alice"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("silence ") and "job=llama-*, kind=straggler, host=node-07" in out and "by alice" in out
    sid = out.split()[1].rstrip(":")
    (s,) = listing()
    assert (s["silence_id"], s["state"], s["matchers"], s["reason"]) == (
        sid, "active", {"job": "llama-*", "kind": "straggler", "host": "node-07"}, "draining node-07")
    assert main(["silence", "expire", sid]) == 0 and f"silence {sid} expired" in capsys.readouterr().out
    assert listing() == []
    assert [(x["silence_id"], x["state"]) for x in listing("--all")] == [(sid, "expired")]
    for bad, message in ((["--match", "job", "--for", "2h"], "expected label=glob"),
                         (["--match", "job=x", "--for", "soon"], "not a duration"),
                         (["--match", "job=x", "--for", "400d"], "at most 365 days")):
        assert main(["silence", "add", *bad, "--reason", "r"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert main(["silence", "expire", "nope"]) == 2 and "no silence 'nope'" in capsys.readouterr().err
