"""The Recovery page's buttons on the server: without the token nothing is published; with it, a
recovery event (with its reason and who asked) lands on the real broker's `recovery` topic.

Through the live dashboard's own callback endpoint (what the confirmation dialog's OK posts), so a
hidden or disabled button is not what protects the cluster."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from vigil.contract import RecoveryAction, decode_batch
from vigil.dashboard.actions import ActionRefused, ActionRequest, Actions, KafkaPublisher
from vigil.dashboard.service import DashboardService
from vigil.dashboard.settings import DashboardSettings
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka
TOKEN = "correct horse battery staple"
CORDON = {"action": "cordon", "target": "h2", "job": "job-a"}


def published(settings: VigilSettings, bootstrap: str) -> list[RecoveryAction]:
    from vigil.kafka.reader import read_topics

    out: list[RecoveryAction] = []
    for rec in read_topics(settings, bootstrap, [settings.topic("recovery")], timeout=10):
        out += [e for e in decode_batch(rec.value).events if isinstance(e, RecoveryAction)]
    return out


def confirm(url: str, pending: dict[str, str], token: str | None, reason: str = "NIC flaps", name: str = "",
            headers: dict[str, str] | None = None) -> str:
    """POST the `confirmed` callback as the browser does after OK in the dialog; the answer shown."""
    states = (("rec-pending", "data", pending), ("rec-token", "value", token), ("rec-name", "value", name),
              ("rec-reason", "value", reason))
    payload = {"output": "rec-result.children", "outputs": {"id": "rec-result", "property": "children"},
               "inputs": [{"id": "rec-confirm", "property": "submit_n_clicks", "value": 1}],
               "state": [{"id": i, "property": p, "value": v} for i, p, v in states],
               "changedPropIds": ["rec-confirm.submit_n_clicks"]}
    resp = httpx.post(url.rstrip("/") + "/_dash-update-component", json=payload, timeout=60, headers=headers)
    resp.raise_for_status()
    return str(resp.json()["response"]["rec-result"]["children"])


@pytest.fixture
def dashboard(topics: VigilSettings, broker_bootstrap: str, database: str, clickhouse_dsn: str,
              request: pytest.FixtureRequest) -> Iterator[str]:
    from vigil.clickhouse.client import connect

    token, header = getattr(request, "param", (TOKEN, None))
    svc = DashboardService(client=connect(clickhouse_dsn, database=database),
                           settings=DashboardSettings(port=0, action_token=token, user_header=header),
                           publisher=KafkaPublisher(settings=topics, bootstrap=broker_bootstrap))
    svc.start()
    try:
        yield svc.url
    finally:
        svc.stop()


@pytest.mark.clickhouse
@pytest.mark.parametrize("dashboard", [(None, None)], indirect=True)
def test_a_dashboard_without_a_token_refuses_every_action(dashboard: str, topics: VigilSettings,
                                                          broker_bootstrap: str) -> None:
    for pending in (CORDON, {"action": "approve", "target": "job-a/host_fault/h2/1", "job": "job-a"}):
        assert confirm(dashboard, pending, token=TOKEN).startswith("refused: read-only"), pending
    assert published(topics, broker_bootstrap) == []


@pytest.mark.clickhouse
def test_without_the_right_token_nothing_is_published_with_it_the_request_is(
        dashboard: str, topics: VigilSettings, broker_bootstrap: str) -> None:
    assert confirm(dashboard, CORDON, token=None).startswith("refused: wrong or missing")
    assert confirm(dashboard, CORDON, token="guess").startswith("refused: wrong or missing")
    assert confirm(dashboard, CORDON, token=TOKEN, reason=" ").startswith("refused: say why")
    assert published(topics, broker_bootstrap) == []

    answer = confirm(dashboard, CORDON, token=TOKEN, name="alice")
    assert answer.startswith("cordon h2: published (request/") and "dashboard:alice" in answer
    (event,) = published(topics, broker_bootstrap)
    assert (event.action, event.target, event.status, event.job_id) == ("cordon", "h2", "planned", "job-a")
    assert (event.actor, event.reason) == ("dashboard:alice", "NIC flaps")
    assert event.command_id.startswith("request/")  # what the controller executes (tests/recovery/test_engine.py)


def test_approve_is_the_event_vigil_recovery_approve_publishes(topics: VigilSettings, broker_bootstrap: str) -> None:
    actions = Actions(token=None, publisher=KafkaPublisher(settings=topics, bootstrap=broker_bootstrap))
    req = ActionRequest(action="approve", job_id="job-a", target="job-a/host_fault/h2/1")
    with pytest.raises(ActionRefused):
        actions.perform(req, token=TOKEN, reason="go")
    from pydantic import SecretStr

    actions.token = SecretStr(TOKEN)
    actions.perform(req, token=TOKEN, reason="checked the node", who="bob")
    (event,) = published(topics, broker_bootstrap)
    assert (event.action, event.status, event.target, event.incident_id, event.actor) == (
        "approve", "succeeded", "job-a", "job-a/host_fault/h2/1", "dashboard:bob")
    assert "checked the node" in event.reason


@pytest.mark.clickhouse
@pytest.mark.parametrize("dashboard", [(TOKEN, "X-Forwarded-User")], indirect=True)
def test_behind_a_proxy_the_identity_is_its_authenticated_user_and_required(
        dashboard: str, topics: VigilSettings, broker_bootstrap: str) -> None:
    answer = confirm(dashboard, CORDON, token=TOKEN, name="alice")  # a typed name is no identity here
    assert answer == "refused: no authenticated user: the reverse proxy's X-Forwarded-User header is missing"
    assert published(topics, broker_bootstrap) == []
    answer = confirm(dashboard, CORDON, token=TOKEN, name="alice", headers={"x-forwarded-user": "carol@corp <x>"})
    assert answer.startswith("cordon h2: published") and "dashboard:carol@corp__x_" in answer
    (event,) = published(topics, broker_bootstrap)
    assert (event.actor, event.details) == ("dashboard:carol@corp__x_", {"identity": "header:X-Forwarded-User"})
