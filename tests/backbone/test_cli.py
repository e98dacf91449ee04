"""`vigil up --detach | status | tail | migrate | down` as real subprocesses with a temporary VIGIL_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.signed import sealed
from vigil.contract import SPECS, Event, EventSpec
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]


def vigil(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vigil", *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("vigil-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env["VIGIL_HOME"] = str(home)
    up = vigil(env, "up", "--detach", "--no-dashboard")
    assert up.returncode == 0, up.stderr + up.stdout
    yield env
    vigil(env, "down")


def test_status_reports_every_part_healthy(stack: dict[str, str]) -> None:
    res = vigil(stack, "status", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is True
    assert {"broker", "clickhouse"} <= set(doc["parts"])
    assert all(part["ok"] for part in doc["parts"].values())


def test_status_shows_each_services_metrics_url_and_each_answers(stack: dict[str, str]) -> None:
    import re

    import httpx

    res = vigil(stack, "status")
    assert res.returncode == 0, res.stdout + res.stderr
    urls = dict(re.findall(r"metrics (\S+)\s+(http://\S+/metrics)", res.stdout))
    assert {"analyzer", "recovery", "notify", "(all)"} <= urls.keys(), res.stdout
    assert "vigil_ingest_events_total" in httpx.get(urls["analyzer"], timeout=10).text
    assert "vigil_recovery_leading" in httpx.get(urls["recovery"], timeout=10).text
    assert "vigil_notifications_decided_total" in httpx.get(urls["notify"], timeout=10).text
    token = json.loads((Path(stack["VIGIL_HOME"]) / "stack.json").read_text())["token"]
    both = httpx.get(urls["(all)"], headers={"Authorization": f"Bearer {token}"}, timeout=10).text
    assert "vigil_ingest_events_total" in both and "vigil_recovery_leading" in both


def fresh(spec: EventSpec) -> Event:
    """The contract's example, dated now: its fixed date would age past the wire's 30 days (the stack's default)."""
    return spec.model.model_validate({**spec.example, "ts": datetime.now(UTC)})


def test_tail_prints_what_was_produced(stack: dict[str, str]) -> None:
    settings = VigilSettings(home=Path(stack["VIGIL_HOME"]))
    state = json.loads((settings.home / "stack.json").read_text())
    producer = EventProducer(settings=settings, bootstrap=state["bootstrap"])
    # decisions signed with the stack's keys, as their real producers would: nothing here is refused
    producer.send(sealed(settings.home, [fresh(s) for s in SPECS]))
    producer.flush()
    res = vigil(stack, "tail", "--from-beginning", "--kind", "alert", "--kind", "step", "--json")
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    # the services raise a `security` alert of their own for the examples no host attested (a member report)
    kinds = sorted(e["kind"] for e in events if e.get("alert") != "security")
    assert kinds == ["alert", "step"], events
    human = vigil(stack, "tail", "--from-beginning", "--max", "3")
    assert len(human.stdout.splitlines()) == 3
    quiet = vigil(stack, "tail", "--timeout", "2")  # only new events: there are none
    assert quiet.stdout == ""


def test_migrate_through_running_stack_is_idempotent(stack: dict[str, str]) -> None:
    res = vigil(stack, "migrate")
    assert res.returncode == 0, res.stderr
    assert "applied" not in res.stdout and "ok        0001_dead_letters" in res.stdout


def test_second_up_is_refused_with_one_line(stack: dict[str, str]) -> None:
    res = vigil(stack, "up", "--detach")
    assert res.returncode == 2
    assert "already running" in res.stderr and "Traceback" not in res.stderr


def test_status_against_an_external_cluster_shows_the_analyzer_group(stack: dict[str, str], tmp_path: Path) -> None:
    """Production mode (no stack under VIGIL_HOME): lag and commit rate of the analyzer group from the broker."""
    bootstrap = json.loads((Path(stack["VIGIL_HOME"]) / "stack.json").read_text())["bootstrap"]
    producer = EventProducer(settings=VigilSettings(home=tmp_path), bootstrap=bootstrap)
    producer.send([fresh(s) for s in SPECS if s.kind == "step"])
    producer.flush()
    env = {**stack, "VIGIL_HOME": str(tmp_path / "elsewhere"), "VIGIL_KAFKA_BOOTSTRAP": bootstrap,
           "VIGIL_CLICKHOUSE_DSN": f"chdb://{tmp_path / 'ch'}"}
    res = vigil(env, "status", "--json")
    doc = json.loads(res.stdout)
    assert doc["mode"] == "external" and doc["parts"]["analyzer"]["group"] == "vigil-analyzer"
    assert {"lag", "records_per_s"} <= set(doc["parts"]["analyzer"])
    # each service announced itself on the broker: its metrics URL, read back from there, answers
    import httpx

    up = {s["service"]: s for s in doc["services"] if s["state"] == "up"}
    assert {"analyzer", "controller", "notifier"} <= up.keys(), doc["services"]
    for kind, metric in (("analyzer", "vigil_ingest_events_total"), ("controller", "vigil_recovery_leading"),
                         ("notifier", "vigil_notifications_decided_total")):
        assert not up[kind]["stale"] and metric in httpx.get(up[kind]["metrics_url"], timeout=10).text
    human = vigil(env, "status")
    assert f"metrics controller  {up['controller']['metrics_url']}  (" in human.stdout, human.stdout
    idle = vigil({**env, "VIGIL_ANALYZER_GROUP_ID": "nobody-consumes"}, "status", "--json")
    part = json.loads(idle.stdout)["parts"]["analyzer"]
    assert idle.returncode == 1 and part["ok"] is False and part["lag"] >= 1 and part["records_per_s"] == 0
    assert "is an analyzer running" in part["error"]


def test_down_leaves_nothing_and_status_fails(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env["VIGIL_HOME"] = str(tmp_path)
    assert vigil(env, "up", "--detach", "--no-analyzer", "--no-dashboard").returncode == 0
    state = json.loads((tmp_path / "stack.json").read_text())
    assert vigil(env, "down").returncode == 0
    for pid in (state["pid"], state["broker_pid"]):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    res = vigil(env, "status")
    assert res.returncode == 1 and "no stack running" in res.stdout


def test_bad_setting_is_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "VIGIL_HOME": str(tmp_path), "VIGIL_KAFKA_BOOTSTRAP": "no-port-here"}
    res = vigil(env, "status")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "VIGIL_KAFKA_BOOTSTRAP" in res.stderr


def test_unreachable_cluster_names_the_address(tmp_path: Path) -> None:
    env = {**os.environ, "VIGIL_HOME": str(tmp_path), "VIGIL_KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "VIGIL_CLICKHOUSE_DSN": "http://127.0.0.1:1"}
    res = vigil(env, "status", "--json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert "127.0.0.1:1" in doc["parts"]["kafka"]["error"] and "VIGIL_KAFKA_BOOTSTRAP" in doc["parts"]["kafka"]["error"]
    assert "VIGIL_CLICKHOUSE_DSN" in doc["parts"]["clickhouse"]["error"]


def _commands() -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every command path (`analyzer alerts` too) with its options and their help texts."""
    import argparse

    from vigil.app.cli.main import build_parser

    found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        options: list[tuple[str, str | None]] = []
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    walk(child, f"{path} {name}".strip())
            else:
                options.append(("/".join(a.option_strings) or a.dest, a.help))
        if path:
            found.append((path, options))

    walk(build_parser(), "")
    return found


@pytest.mark.pure
def test_every_command_documents_every_option() -> None:
    undocumented = [(cmd, opt) for cmd, opts in _commands() for opt, text in opts if not text]
    assert len(_commands()) >= 10 and undocumented == []


@pytest.mark.pure
def test_help_works_on_every_command() -> None:
    for cmd, _ in _commands():
        res = vigil(dict(os.environ), *cmd.split(), "--help", timeout=60)
        assert res.returncode == 0 and f"usage: vigil {cmd}" in res.stdout, (cmd, res.stderr)


@pytest.mark.parametrize(("args", "setting"), [(("tail", "--max", "1", "--timeout", "5"), "VIGIL_KAFKA_BOOTSTRAP=127.0.0.1:1"),
                                               (("migrate",), "VIGIL_CLICKHOUSE_DSN=http://127.0.0.1:1")])
def test_unreachable_part_is_one_line_naming_setting_and_address(tmp_path: Path, args: tuple[str, ...],
                                                                 setting: str) -> None:
    env = {**os.environ, "VIGIL_HOME": str(tmp_path), "VIGIL_KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "VIGIL_CLICKHOUSE_DSN": "http://127.0.0.1:1"}
    res = vigil(env, *args)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().count("\n") == 0 and setting in res.stderr, res.stderr


@pytest.mark.pure
def test_up_offers_to_leave_out_exactly_the_hosted_services() -> None:
    from vigil.app.components import SERVICES

    up = next(opts for cmd, opts in _commands() if cmd == "up")
    flags = {opt for opt, _ in up if opt.startswith("--no-")}
    assert flags == {f"--no-{s.name}" for s in SERVICES} and {"--no-analyzer", "--no-dashboard"} <= flags
