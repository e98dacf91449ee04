"""`vigil diagnostics publish`: a node's diagnostics run outside an agent (a Slurm prolog) reach the log attested by
that node's own key; a line of another host, another kind or no event at all is refused, never signed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from vigil.contract.control import Diagnostic
from vigil.kafka.reader import read_events
from vigil.settings import VigilSettings
from vigil.signing import KeyStore, check
from vigil.signing.setup import verifier

pytestmark = pytest.mark.kafka


def _line(host: str, ok: bool = True) -> str:
    return Diagnostic(job_id="prolog-7", host=host, ts=datetime.now(UTC), test="gemm", group=[host], ok=ok,
                      values={"gemm_gflops": 1.0}).model_dump_json()


def _publish(settings: VigilSettings, host: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIGIL_HOME": str(settings.home), "VIGIL_KAFKA_BOOTSTRAP": str(settings.kafka_bootstrap),
           "VIGIL_TOPIC_PREFIX": settings.topic_prefix}
    return subprocess.run([sys.executable, "-m", "vigil", "diagnostics", "publish", "--host", host], input=stdin,
                          env=env, capture_output=True, text=True, timeout=120)


def test_results_are_published_attested_and_other_lines_refused(topics: VigilSettings) -> None:
    KeyStore(topics.home / "keys").issue("n1")
    mine = _line("n1", ok=False)
    done = _publish(topics, "n1", "\n".join([mine, _line("n2"), '{"kind": "member"}', "log text", ""]))
    assert done.returncode == 1 and "published 1" in done.stdout and "refused 2" in done.stdout, done
    assert "speaks for n2" in done.stderr and "not a diagnostic event" in done.stderr
    got = read_events(topics, str(topics.kafka_bootstrap), "recovery", Diagnostic)
    assert [(e.host, e.ok, e.event_id) for e in got] == [("n1", False, json.loads(mine)["event_id"])]
    assert check(got[0], verifier(topics.home)) is None  # the controller takes it as n1's word


def test_without_the_hosts_key_nothing_is_published(topics: VigilSettings) -> None:
    done = _publish(topics, "n9", _line("n9"))
    assert done.returncode == 2 and "vigil keys issue n9" in done.stderr
