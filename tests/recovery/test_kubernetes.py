"""The Kubernetes node backend, with the official client, against a fake API server over HTTP."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.recovery.kube_fake import FakeKube
from vigil.recovery.backends.base import NodeBackend
from vigil.recovery.backends.kubernetes import KubernetesBackend, KubernetesSettings
from vigil.recovery.errors import BackendError

pytestmark = pytest.mark.pure

TOKEN = "s3cret-token"
INCIDENT = "llama/xid/node-1/r3/20261123T120000"
OTHER_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
VIGIL_ANNOTATIONS = {f"vigil.io/cordoned-{k}" for k in ("by", "reason", "incident", "at", "host", "unschedulable")}


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(token=TOKEN) as fake:
        yield fake


def backend(kube: FakeKube, sleeps: list[float] | None = None, **overrides: Any) -> KubernetesBackend:
    given: dict[str, Any] = {"evict_retry_s": 0.01, "evict_retry_max_s": 0.05, "evict_timeout_s": 30, **overrides}
    settings = KubernetesSettings(api_url=kube.url, token=TOKEN, **given)
    if sleeps is None:
        return KubernetesBackend(settings)
    return KubernetesBackend(settings, sleep=sleeps.append)  # records the waits, does not wait


def without_rv(node: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(node))
    del out["metadata"]["resourceVersion"]
    return out


def test_cordon_sets_unschedulable_taint_and_audit_annotations_once(kube: FakeKube) -> None:
    kube.add_node("node-1", taints=[OTHER_TAINT], annotations={"team.io/owner": "infra"})
    b: NodeBackend = backend(kube)
    change = b.cordon("node-1", reason="Xid 79: GPU fell off the bus", incident_id=INCIDENT, actor="vigil-recovery")
    assert change.changed and change.data["node"] == "node-1"

    node = kube.node("node-1")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [OTHER_TAINT, {"key": "vigil.io/faulty", "value": "llama.xid.node-1.r3.20261123T120000",
                                                    "effect": "NoSchedule"}]
    ann = node["metadata"]["annotations"]
    assert ann["team.io/owner"] == "infra"
    assert ann["vigil.io/cordoned-by"] == "vigil-recovery"
    assert ann["vigil.io/cordoned-reason"] == "Xid 79: GPU fell off the bus"
    assert ann["vigil.io/cordoned-incident"] == INCIDENT
    assert ann["vigil.io/cordoned-host"] == "node-1"
    assert ann["vigil.io/cordoned-unschedulable"] == "true"
    assert ann["vigil.io/cordoned-at"] == change.data["at"] and ann["vigil.io/cordoned-at"].endswith("Z")
    assert node["metadata"]["labels"]["vigil.io/cordoned"] == "true"

    [patch] = kube.sent("PATCH")
    assert patch.path == "/api/v1/nodes/node-1"
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"  # what the client sends
    assert patch.headers["authorization"] == f"Bearer {TOKEN}"
    assert patch.body["metadata"]["resourceVersion"]  # optimistic concurrency: never overwrite others' taints

    again = b.cordon("node-1", reason="again", incident_id="another", actor="vigil-recovery")
    assert not again.changed and INCIDENT in again.detail
    assert len(kube.sent("PATCH")) == 1
    assert kube.node("node-1")["metadata"]["annotations"]["vigil.io/cordoned-incident"] == INCIDENT


def test_uncordon_removes_only_what_vigil_added(kube: FakeKube) -> None:
    before = kube.add_node("node-1", taints=[OTHER_TAINT], annotations={"team.io/owner": "infra"},
                           labels={"pool": "h100"})
    b = backend(kube)
    b.cordon("node-1", reason="Xid 79", incident_id=INCIDENT, actor="vigil-recovery")

    change = b.uncordon("node-1", reason="repaired", actor="alice")
    assert change.changed and change.data["was"] == "Xid 79" and change.data["incident_id"] == INCIDENT
    assert without_rv(kube.node("node-1")) == {**without_rv(before), "spec": {**before["spec"], "taints": [OTHER_TAINT]}}
    assert not VIGIL_ANNOTATIONS & set(kube.node("node-1")["metadata"]["annotations"])

    again = b.uncordon("node-1", reason="repaired", actor="alice")
    assert not again.changed
    assert len(kube.sent("PATCH")) == 2


def test_an_operators_cordon_outlives_vigils_uncordon(kube: FakeKube) -> None:
    kube.add_node("node-1", unschedulable=True)  # `kubectl cordon` by a person, before vigil
    b = backend(kube)
    assert b.cordon("node-1", reason="Xid 48", incident_id=INCIDENT, actor="vigil-recovery").changed
    assert kube.node("node-1")["metadata"]["annotations"]["vigil.io/cordoned-unschedulable"] == "false"
    assert b.uncordon("node-1", reason="ok", actor="vigil-recovery").changed
    node = kube.node("node-1")
    assert node["spec"]["unschedulable"] is True and node["spec"]["taints"] == []
    assert "vigil.io/cordoned" not in node["metadata"].get("labels", {})
    assert "left so" in b.uncordon("node-1", reason="ok", actor="vigil-recovery").detail


def test_a_node_changed_meanwhile_is_reread_and_repatched(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.fail("PATCH", r"^/api/v1/nodes/node-1$", 409, 'Operation cannot be fulfilled on nodes "node-1": '
              "the object has been modified", times=1)
    assert backend(kube).cordon("node-1", reason="r", incident_id=INCIDENT, actor="a").changed
    assert len(kube.sent("GET", "/api/v1/nodes/node-1")) == 2 and len(kube.sent("PATCH")) == 2
    assert kube.node("node-1")["spec"]["unschedulable"] is True


def test_eviction_waits_out_a_disruption_budget_then_succeeds(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.add_node("node-2")
    kube.add_pod("train", "j1-worker-0", node="node-1", labels={"vigil.io/job": "j1"})
    kube.add_pod("train", "j1-worker-1", node="node-1", labels={"vigil.io/job": "j1"})
    kube.add_pod("train", "j1-worker-2", node="node-2", labels={"vigil.io/job": "j1"})
    kube.add_pod("train", "j2-worker-0", node="node-1", labels={"vigil.io/job": "j2"})
    kube.block_eviction("train", "j1-worker-1", times=3)
    sleeps: list[float] = []

    change = backend(kube, sleeps).evict("node-1", job_id="j1", reason="Xid 79", incident_id=INCIDENT)

    assert change.changed and change.data["pdb_retries"] == 3
    assert sorted(change.data["evicted"]) == ["train/j1-worker-0", "train/j1-worker-1"]
    assert kube.blocked_answers("train", "j1-worker-1") == 3
    assert sleeps == [0.01, 0.02, 0.04]  # doubling waits between refusals, capped at evict_retry_max_s
    assert sorted(name for _, name in kube.pods) == ["j1-worker-2", "j2-worker-0"]  # other node, other job stay
    lists = kube.sent("GET", "/api/v1/pods")
    assert lists[0].query == {"labelSelector": "vigil.io/job=j1", "fieldSelector": "spec.nodeName=node-1"}
    posts = kube.sent("POST")
    assert len(posts) == 2 + 3
    assert posts[0].path == "/api/v1/namespaces/train/pods/j1-worker-0/eviction"
    assert posts[0].body["kind"] == "Eviction" and posts[0].body["apiVersion"] == "policy/v1"
    assert posts[0].body["metadata"] == {"name": "j1-worker-0", "namespace": "train"}


def test_eviction_honours_retry_after(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.add_pod("train", "p", node="node-1", labels={"vigil.io/job": "j1"})
    kube.block_eviction("train", "p", times=1, retry_after_s=2)
    sleeps: list[float] = []
    assert backend(kube, sleeps).evict("node-1", job_id="j1", reason="r", incident_id="i").changed
    assert sleeps == [2.0]


def test_a_budget_that_never_allows_is_a_backend_error_after_the_bound(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.add_pod("train", "j1-worker-0", node="node-1", labels={"vigil.io/job": "j1"})
    kube.block_eviction("train", "j1-worker-0", times=None, pdb="j1-pdb")
    b = backend(kube, evict_timeout_s=0.3)
    with pytest.raises(BackendError) as err:
        b.evict("node-1", job_id="j1", reason="Xid 79", incident_id=INCIDENT)
    message = str(err.value)
    assert message.startswith("kubernetes backend: evict job j1 from host node-1 (node node-1)")
    assert "train/j1-worker-0" in message and "PodDisruptionBudget" in message
    assert "The disruption budget j1-pdb needs 2 healthy pods" in message
    assert kube.blocked_answers("train", "j1-worker-0") >= 2  # it retried, and stopped
    assert ("train", "j1-worker-0") in kube.pods


def test_a_pod_already_gone_counts_as_evicted(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.add_pod("train", "p", node="node-1", labels={"vigil.io/job": "j1"})
    kube.vanish_after_list("train", "p")  # listed, then deleted before the eviction arrives: a 404
    change = backend(kube).evict("node-1", job_id="j1", reason="r", incident_id="i")
    assert not change.changed and change.data["gone"] == ["train/p"]
    assert len(kube.sent("POST")) == 1
    nothing = backend(kube).evict("node-1", job_id="j1", reason="r", incident_id="i")
    assert not nothing.changed and "no pods of job j1" in nothing.detail


def test_eviction_waits_until_the_pods_have_terminated(kube: FakeKube) -> None:
    kube.evict_linger = 2  # evicted pods stay terminating for two more pod lists
    kube.add_node("node-1")
    kube.add_pod("train", "p", node="node-1", labels={"vigil.io/job": "j1"})
    sleeps: list[float] = []
    assert backend(kube, sleeps).evict("node-1", job_id="j1", reason="r", incident_id="i").changed
    assert not kube.pods and len(kube.sent("GET", "/api/v1/pods")) == 4 and len(sleeps) == 2


@pytest.mark.parametrize(("method", "path", "status", "words"), [
    ("PATCH", r"^/api/v1/nodes/node-1$", 500, "patch node node-1 of host node-1: HTTP 500"),
    ("PATCH", r"^/api/v1/nodes/node-1$", 403, "patch node node-1 of host node-1: HTTP 403"),
    ("GET", r"^/api/v1/nodes/node-1$", 503, "read node node-1 of host node-1: HTTP 503"),
])
def test_api_errors_on_cordon_are_backend_errors(kube: FakeKube, method: str, path: str, status: int, words: str) -> None:
    kube.add_node("node-1")
    kube.fail(method, path, status, "etcdserver: request timed out" if status != 403 else
              'nodes "node-1" is forbidden: User "system:serviceaccount:vigil:vigil-recovery" cannot patch resource')
    with pytest.raises(BackendError) as err:
        backend(kube).cordon("node-1", reason="r", incident_id=INCIDENT, actor="a")
    assert str(err.value).startswith(f"kubernetes backend: {words}")
    assert ("etcdserver" if status != 403 else "cannot patch resource") in str(err.value)


def test_api_errors_on_evict_name_host_and_pod(kube: FakeKube) -> None:
    kube.add_node("node-1")
    kube.add_pod("train", "p", node="node-1", labels={"vigil.io/job": "j1"})
    kube.fail("POST", r"/eviction$", 403, 'pods "p" is forbidden: cannot create resource "pods/eviction"')
    with pytest.raises(BackendError, match=r"evict pod train/p from host node-1: HTTP 403 .*pods/eviction"):
        backend(kube).evict("node-1", job_id="j1", reason="r", incident_id="i")
    with pytest.raises(BackendError, match="not a valid label value"):
        backend(kube).evict("node-1", job_id="a/b", reason="r", incident_id="i")


def test_unknown_node_bad_token_and_no_server_are_clear(kube: FakeKube) -> None:
    with pytest.raises(BackendError, match=r"read node nope of host nope: HTTP 404 .*not found; map hosts"):
        backend(kube).cordon("nope", reason="r", incident_id="i", actor="a")
    kube.add_node("node-1")
    bad = KubernetesBackend(KubernetesSettings(api_url=kube.url, token="wrong"))
    with pytest.raises(BackendError, match="HTTP 401"):
        bad.cordoned()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    gone = KubernetesBackend(KubernetesSettings(api_url=f"http://127.0.0.1:{port}", token=TOKEN))
    with pytest.raises(BackendError, match=f"API server http://127.0.0.1:{port} unreachable"):
        gone.cordoned()


def test_cordoned_lists_vigils_nodes_by_host(kube: FakeKube) -> None:
    kube.add_node("ip-10-0-0-7", labels={"vigil.io/host": "gpu-7"})
    kube.add_node("node-2")
    kube.add_node("node-3", unschedulable=True)  # an operator's cordon is not vigil's
    b = backend(kube, node_map={"gpu-2": "node-2"}, node_label="vigil.io/host")
    b.cordon("gpu-7", reason="Xid 79", incident_id=INCIDENT, actor="vigil-recovery")
    b.cordon("gpu-2", reason="ECC", incident_id="inc-2", actor="alice")
    assert kube.node("ip-10-0-0-7")["spec"]["unschedulable"] is True

    listed = b.cordoned()
    assert sorted(listed) == ["gpu-2", "gpu-7"]
    assert listed["gpu-7"].incident_id == INCIDENT and listed["gpu-7"].reason == "Xid 79"
    assert listed["gpu-2"].by == "alice" and listed["gpu-2"].at.endswith("Z")
    assert kube.sent("GET", "/api/v1/nodes")[-1].query == {"labelSelector": "vigil.io/cordoned=true,!vigil.io/quarantined-gpus"}

    b.uncordon("gpu-7", reason="fixed", actor="alice")
    assert sorted(b.cordoned()) == ["gpu-2"]
    with pytest.raises(BackendError, match=r"0 nodes have label vigil\.io/host=gpu-9"):
        b.cordon("gpu-9", reason="r", incident_id="i", actor="a")


def test_kubeconfig_is_loaded_by_the_clients_own_loader(kube: FakeKube, tmp_path: Path) -> None:
    kube.add_node("node-1")
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "vigil", "user": {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "vigil"}}]}))
    b = KubernetesBackend(KubernetesSettings(kubeconfig=str(path)))
    assert b.cordon("node-1", reason="r", incident_id="i", actor="a").changed
    with pytest.raises(BackendError, match="no API server configuration"):
        KubernetesBackend(KubernetesSettings(kubeconfig=str(tmp_path / "missing")))


def test_a_gpu_quarantine_labels_and_cordons_the_node_but_keeps_it_for_vigil(kube: FakeKube) -> None:
    kube.add_node("node-1", taints=[OTHER_TAINT])
    kube.add_node("node-2")
    b: NodeBackend = backend(kube)
    assert b.gpu_quarantine
    change = b.quarantine("node-1", (3,), reason="Xid 48 on GPU 3", incident_id=INCIDENT, actor="controller")
    assert change.changed and change.data["gpus"] == [3]
    assert b.quarantine("node-1", (0, 3), reason="Xid 94 on GPU 0", incident_id=INCIDENT, actor="controller").changed
    assert not b.quarantine("node-1", (0,), reason="again", incident_id=INCIDENT, actor="controller").changed
    node = kube.node("node-1")
    assert node["metadata"]["labels"]["vigil.io/quarantined-gpus"] == "0.3"
    assert node["spec"]["unschedulable"] is True  # no new pods: the scheduler cannot hand out single GPUs
    assert {h: q.gpus for h, q in b.quarantined().items()} == {"node-1": (0, 3)}
    assert b.cordoned() == {}  # the host stays in the job: vigil's agent trains on its other GPUs

    b.cordon("node-2", reason="Xid 79", incident_id=INCIDENT, actor="controller")
    assert set(b.cordoned()) == {"node-2"}
    assert b.cordon("node-1", reason="Xid 79 on GPU 1", incident_id=INCIDENT, actor="controller").changed
    assert set(b.cordoned()) == {"node-1", "node-2"} and b.quarantined() == {}  # the host's cordon took over

    b.quarantine("node-2", (1,), reason="Xid 48", incident_id=INCIDENT, actor="controller")  # cordoned: nothing
    assert b.quarantined() == {}
    kube.add_node("node-3")
    b.quarantine("node-3", (2,), reason="Xid 48", incident_id=INCIDENT, actor="controller")
    assert b.uncordon("node-3", reason="GPU replaced", actor="user:ops").changed
    node3 = kube.node("node-3")
    assert "vigil.io/quarantined-gpus" not in (node3["metadata"].get("labels") or {})
    assert not node3["spec"].get("unschedulable") and b.quarantined() == {}


def test_where_the_api_server_offers_device_taints_a_gpu_is_tainted_not_the_node(kube: FakeKube) -> None:
    kube.dra = "v1beta2"
    kube.add_node("node-1")
    b: NodeBackend = backend(kube)
    assert b.quarantine("node-1", (3,), reason="Xid 48 on GPU 3", incident_id=INCIDENT, actor="controller").changed
    assert not b.quarantine("node-1", (3,), reason="again", incident_id=INCIDENT, actor="controller").changed
    (rule,) = kube.rules.values()
    assert rule["apiVersion"] == "resource.k8s.io/v1beta2" and rule["metadata"]["name"] == "vigil-node-1-gpu3"
    assert rule["spec"] == {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-3"},
                            "taint": {"key": "vigil.io/faulty", "value": "llama.xid.node-1.r3.20261123T120000",
                                      "effect": "NoSchedule"}}
    node = kube.node("node-1")
    assert not node["spec"].get("unschedulable")  # the node's other GPUs stay schedulable
    assert {h: q.gpus for h, q in b.quarantined().items()} == {"node-1": (3,)} and b.cordoned() == {}
    assert b.uncordon("node-1", reason="GPU replaced", actor="user:ops").changed
    assert kube.rules == {} and b.quarantined() == {}
    discovery = [r.path for r in kube.sent("GET", "/apis/") if not r.path.endswith("/devicetaintrules")]
    assert discovery == ["/apis/resource.k8s.io/v1", "/apis/resource.k8s.io/v1beta2"]  # asked once


def test_uncordoning_a_node_clears_only_its_own_device_taint_rules(kube: FakeKube) -> None:
    """Node names longer than a label value (63) share their label when their first 63 characters agree: clearing one
    node's rules must not clear the other's (review of 2026-12-07)."""
    kube.dra = "v1beta2"
    a, c = "n" * 63 + "-a", "n" * 63 + "-c"
    kube.add_node(a)
    kube.add_node(c)
    b: NodeBackend = backend(kube)
    for node in (a, c):
        assert b.quarantine(node, (1,), reason="Xid 48", incident_id=INCIDENT, actor="controller").changed
    assert b.uncordon(a, reason="GPU replaced", actor="user:ops").changed
    assert [r["spec"]["deviceSelector"]["pool"] for r in kube.rules.values()] == [c]
