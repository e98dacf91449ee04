"""The Kubernetes node backend: cordon, taint, annotate, evict through the API server.

`KubernetesBackend` implements `base.NodeBackend` with the official `kubernetes` client:

* **cordon** — one PATCH of the node: `spec.unschedulable: true`, the taint
  `vigil.io/faulty=<incident>:NoSchedule`, the audit annotations `vigil.io/cordoned-by`,
  `-reason`, `-incident`, `-at`, `-host`, `-unschedulable` (whether vigil set the flag) and the
  label `vigil.io/cordoned=true` (the index `cordoned()` selects by, so it never lists the whole
  fleet). Idempotent: a node that already carries all of it is not patched (`changed` False).
* **uncordon** — removes exactly what vigil added: its taint, its annotations and label, and
  `unschedulable` only when vigil set it. Other taints, annotations and an operator's own
  cordon stay.
* **evict** — lists the job's pods on the node (`pod_selector` with the job id, field selector
  `spec.nodeName`) and POSTs a policy/v1 Eviction for each, so PodDisruptionBudgets are
  respected: a 429 means "not now", retried with doubling waits (the server's Retry-After when
  it sends one) until `evict_timeout_s`, then a `BackendError` naming the host, pod and PDB
  message. A pod already gone (404) counts as evicted. With `wait_deleted` it then waits, within
  the same bound, until the evicted pods (by uid) have left the API.

Patches carry the node's `resourceVersion`, so a concurrent writer (kubectl, another
controller) makes the API server answer 409 and the call re-reads and retries
(`conflict_retries`) instead of overwriting the other writer's taints. Every API failure is a
`BackendError` with one line naming the host, node or pod, the HTTP status and the server's
message. Host -> node: `node_map` first, else the node whose `node_label` equals the host, else
the node named like the host (the agent DaemonSet sets `VIGIL_HOST` to `spec.nodeName`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from vigil.errors import one_line
from vigil.recovery.backends.base import Change, CordonInfo
from vigil.recovery.errors import BackendError

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_REASON_CHARS = 1024  # an annotation is an audit note, not a log


class KubernetesSettings(BaseModel):
    """How the controller reaches the API server and what it writes on nodes (`backend = "kubernetes"`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: str = Field(default="", description="API server URL with `token` (tests, no kubeconfig); "
                                                "empty: in-cluster service account in a pod, else kubeconfig")
    token: SecretStr | None = Field(default=None, description="bearer token for api_url")
    ca_file: str = Field(default="", description="CA bundle for api_url (empty: the system's)")
    verify_tls: bool = True
    kubeconfig: str = Field(default="", description="kubeconfig path (empty: $KUBECONFIG or ~/.kube/config)")
    context: str = Field(default="", description="kubeconfig context (empty: its current one)")
    request_timeout_s: float = Field(default=15.0, gt=0, description="per API request")
    node_map: dict[str, str] = Field(default_factory=dict, description="host -> node name, checked first")
    node_label: str = Field(default="", description="node label whose value is the host (e.g. "
                                                    "kubernetes.io/hostname); empty: node name = host")
    key_prefix: str = Field(default="vigil.io/", description="prefix of vigil's annotations and label")
    taint_key: str = "vigil.io/faulty"
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    pod_namespace: str = Field(default="", description="namespace of the jobs' pods (empty: all namespaces)")
    pod_selector: str = Field(default="vigil.io/job={job}", description="label selector of a job's pods; "
                                                                        "{job} is the job id")
    evict_timeout_s: float = Field(default=300.0, gt=0, description="bound on one evict: PDB retries and "
                                                                    "waiting for the pods to go")
    evict_retry_s: float = Field(default=5.0, gt=0, description="first wait after a PDB 429 (doubles)")
    evict_retry_max_s: float = Field(default=30.0, gt=0, description="longest wait between eviction tries")
    evict_grace_s: int | None = Field(default=None, ge=0, description="pods' termination grace (None: their own)")
    wait_deleted: bool = Field(default=True, description="evict returns once the evicted pods are gone")
    conflict_retries: int = Field(default=5, ge=0, description="re-read and re-patch a node changed meanwhile")


def api_client(settings: KubernetesSettings) -> Any:
    """An `ApiClient` for the settings: explicit URL and token, in-cluster, or kubeconfig."""
    conf = client.Configuration()
    try:
        if settings.api_url:
            conf.host = settings.api_url.rstrip("/")
            if settings.token is not None:
                conf.api_key = {"authorization": "Bearer " + settings.token.get_secret_value()}
            conf.verify_ssl = settings.verify_tls
            conf.ssl_ca_cert = settings.ca_file or None
        elif not settings.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig or None, context=settings.context or None,
                client_configuration=conf, persist_config=False)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise BackendError(f"kubernetes backend: no API server configuration: {one_line(exc)}") from None
    return client.ApiClient(conf)


@dataclass(frozen=True)
class _Keys:
    by: str
    reason: str
    incident: str
    at: str
    host: str
    unschedulable: str  # "true": vigil set spec.unschedulable; "false": it was already so
    label: str

    @classmethod
    def of(cls, prefix: str) -> _Keys:
        return cls(*(prefix + s for s in ("cordoned-by", "cordoned-reason", "cordoned-incident", "cordoned-at",
                                          "cordoned-host", "cordoned-unschedulable", "cordoned")))

    def annotations(self) -> tuple[str, ...]:
        return self.by, self.reason, self.incident, self.at, self.host, self.unschedulable


class KubernetesBackend:
    """`NodeBackend` on a Kubernetes cluster; `api` defaults to `api_client(settings)`."""

    name = "kubernetes"

    def __init__(self, settings: KubernetesSettings, *, api: Any = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._core = client.CoreV1Api(api if api is not None else api_client(settings))
        self._keys = _Keys.of(settings.key_prefix)
        self._sleep, self._clock = sleep, clock

    # -- NodeBackend ---------------------------------------------------------------------------

    def cordon(self, host: str, *, reason: str, incident_id: str, actor: str) -> Change:
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            name = node["metadata"]["name"]
            patch = cordon_patch(node, self.settings, host=host, reason=reason, incident_id=incident_id,
                                 actor=actor, at=_now())
            if patch is None:
                ann = node["metadata"].get("annotations") or {}
                return Change(changed=False, data={"node": name},
                              detail=f"node {name} already cordoned by {ann.get(self._keys.by, '?')} for "
                                     f"{ann.get(self._keys.incident, '?')} at {ann.get(self._keys.at, '?')}")
            if self._patch(host, name, patch):
                taint = f"{self.settings.taint_key}={_label_value(incident_id)}:{self.settings.taint_effect}"
                at = {**(node["metadata"].get("annotations") or {}), **patch["metadata"].get("annotations", {})}
                return Change(changed=True, detail=f"node {name}: unschedulable, taint {taint}, annotated",
                              data={"node": name, "at": at.get(self._keys.at, "")})
        raise self._conflicted("cordon", host)

    def uncordon(self, host: str, *, reason: str, actor: str) -> Change:
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            name = node["metadata"]["name"]
            patch = uncordon_patch(node, self.settings)
            if patch is None:
                left = " (unschedulable by someone else: left so)" if (node.get("spec") or {}).get("unschedulable") else ""
                return Change(changed=False, detail=f"node {name} was not cordoned by vigil{left}", data={"node": name})
            if self._patch(host, name, patch):
                ann = node["metadata"].get("annotations") or {}
                return Change(changed=True, detail=f"node {name}: vigil's taint, annotations and cordon removed "
                                                   f"by {actor} ({reason})",
                              data={"node": name, "was": ann.get(self._keys.reason, ""),
                                    "incident_id": ann.get(self._keys.incident, "")})
        raise self._conflicted("uncordon", host)

    def evict(self, host: str, *, job_id: str, reason: str, incident_id: str) -> Change:
        node = self._node_name(host)
        selector = self._job_selector(job_id, host)
        pods = self._pods(host, selector, node)
        pending = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
                   for p in pods if not p["metadata"].get("deletionTimestamp")}
        terminating = {p["metadata"]["uid"] for p in pods if p["metadata"].get("deletionTimestamp")}
        if not pending and not terminating:
            return Change(changed=False, detail=f"no pods of job {job_id} ({selector}) on node {node}", data={"node": node})
        deadline = self._clock() + self.settings.evict_timeout_s
        evicted: list[str] = []
        gone: list[str] = []
        blocked: dict[str, str] = {}
        tries = 0
        wait = self.settings.evict_retry_s
        while True:
            retry_after = 0.0
            for (ns, pod), uid in list(pending.items()):
                outcome, message, after = self._evict_one(host, ns, pod)
                if outcome == "blocked":
                    blocked[f"{ns}/{pod}"] = message
                    retry_after = max(retry_after, after)
                    continue
                if outcome == "evicted":
                    evicted.append(f"{ns}/{pod}")
                    terminating.add(uid)
                else:
                    gone.append(f"{ns}/{pod}")
                blocked.pop(f"{ns}/{pod}", None)
                del pending[(ns, pod)]
            if not pending:
                break
            tries += 1
            left = deadline - self._clock()
            if left <= 0:
                names = ", ".join(f"{p} ({m})" for p, m in blocked.items())
                raise BackendError(f"kubernetes backend: evict job {job_id} from host {host} (node {node}): "
                                   f"still refused after {tries} tries in {self.settings.evict_timeout_s:g}s "
                                   f"(PodDisruptionBudget): {names}; {len(evicted)} other pod(s) evicted")
            self._sleep(min(max(wait, retry_after), left))
            wait = min(wait * 2, self.settings.evict_retry_max_s)
        if self.settings.wait_deleted and terminating:
            self._wait_gone(host, job_id, selector, node, terminating, deadline)
        return Change(changed=bool(evicted),
                      detail=f"node {node}: {len(evicted)} pod(s) of job {job_id} evicted, {len(gone)} already gone"
                             + (f", after {tries} PodDisruptionBudget refusal round(s)" if tries else ""),
                      data={"node": node, "evicted": evicted, "gone": gone, "pdb_retries": tries,
                            "reason": reason, "incident_id": incident_id})

    def cordoned(self) -> dict[str, CordonInfo]:
        nodes = self._list_nodes("list cordoned nodes", f"{self._keys.label}=true")
        out: dict[str, CordonInfo] = {}
        for node in nodes:
            ann = node["metadata"].get("annotations") or {}
            ours = any(t.get("key") == self.settings.taint_key for t in (node.get("spec") or {}).get("taints") or [])
            if not ours and self._keys.incident not in ann:
                continue
            host = ann.get(self._keys.host) or node["metadata"]["name"]
            out[host] = CordonInfo(host=host, reason=ann.get(self._keys.reason, ""),
                                   incident_id=ann.get(self._keys.incident, ""), by=ann.get(self._keys.by, ""),
                                   at=ann.get(self._keys.at, ""))
        return out

    # -- nodes ---------------------------------------------------------------------------------

    def _node_name(self, host: str) -> str:
        if host in self.settings.node_map:
            return self.settings.node_map[host]
        if self.settings.node_label:
            return str(self._node(host)["metadata"]["name"])
        return host

    def _node(self, host: str) -> dict[str, Any]:
        if self.settings.node_label and host not in self.settings.node_map:
            if not _LABEL_VALUE.match(host) or len(host) > 63:
                raise BackendError(f"kubernetes backend: host {host!r} cannot be a value of label "
                                   f"{self.settings.node_label}; set node_map")
            found = self._list_nodes(f"find the node of host {host}", f"{self.settings.node_label}={host}")
            if len(found) != 1:
                names = ", ".join(n["metadata"]["name"] for n in found) or "none"
                raise BackendError(f"kubernetes backend: host {host}: {len(found)} nodes have label "
                                   f"{self.settings.node_label}={host} ({names}); expected exactly one")
            return found[0]
        name = self.settings.node_map.get(host, host)
        try:
            return self._json(self._core.read_node(name, _preload_content=False,
                                                   _request_timeout=self.settings.request_timeout_s))
        except ApiException as exc:
            hint = "; map hosts to nodes with node_map or node_label" if exc.status == 404 else ""
            raise self._api_error(f"read node {name} of host {host}", exc, hint) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(f"read node {name} of host {host}", exc) from None

    def _list_nodes(self, what: str, label_selector: str) -> list[dict[str, Any]]:
        try:
            doc = self._json(self._core.list_node(label_selector=label_selector, _preload_content=False,
                                                  _request_timeout=self.settings.request_timeout_s))
        except ApiException as exc:
            raise self._api_error(what, exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(what, exc) from None
        return list(doc.get("items") or [])

    def _patch(self, host: str, name: str, patch: dict[str, Any]) -> bool:
        """Apply the patch; False when the node changed since it was read (409: re-read, retry)."""
        try:
            self._core.patch_node(name, patch, _preload_content=False,
                                  _request_timeout=self.settings.request_timeout_s)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise self._api_error(f"patch node {name} of host {host}", exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(f"patch node {name} of host {host}", exc) from None
        return True

    def _conflicted(self, what: str, host: str) -> BackendError:
        return BackendError(f"kubernetes backend: {what} {host}: the node kept changing under us "
                            f"({self.settings.conflict_retries + 1} conflicting patches); try again")

    # -- pods ----------------------------------------------------------------------------------

    def _job_selector(self, job_id: str, host: str) -> str:
        if "{job}" in self.settings.pod_selector and (not _LABEL_VALUE.match(job_id) or len(job_id) > 63):
            raise BackendError(f"kubernetes backend: evict from host {host}: job id {job_id!r} is not a valid "
                               f"label value for pod_selector {self.settings.pod_selector!r}")
        return self.settings.pod_selector.replace("{job}", job_id)

    def _pods(self, host: str, selector: str, node: str) -> list[dict[str, Any]]:
        kw: dict[str, Any] = {"label_selector": selector, "field_selector": f"spec.nodeName={node}",
                              "_preload_content": False, "_request_timeout": self.settings.request_timeout_s}
        what = f"list pods ({selector}) on node {node} of host {host}"
        try:
            if self.settings.pod_namespace:
                resp = self._core.list_namespaced_pod(self.settings.pod_namespace, **kw)
            else:
                resp = self._core.list_pod_for_all_namespaces(**kw)
        except ApiException as exc:
            raise self._api_error(what, exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(what, exc) from None
        return list(self._json(resp).get("items") or [])

    def _evict_one(self, host: str, namespace: str, pod: str) -> tuple[str, str, float]:
        """("evicted" | "gone" | "blocked", the PDB's message, the server's Retry-After seconds)."""
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=client.V1ObjectMeta(name=pod, namespace=namespace),
            delete_options=(client.V1DeleteOptions(grace_period_seconds=self.settings.evict_grace_s)
                            if self.settings.evict_grace_s is not None else None))
        try:
            self._core.create_namespaced_pod_eviction(pod, namespace, body, _preload_content=False,
                                                      _request_timeout=self.settings.request_timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return "gone", "", 0.0
            if exc.status == 429:
                return "blocked", _message(exc), _retry_after(exc)
            raise self._api_error(f"evict pod {namespace}/{pod} from host {host}", exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(f"evict pod {namespace}/{pod} from host {host}", exc) from None
        return "evicted", "", 0.0

    def _wait_gone(self, host: str, job_id: str, selector: str, node: str, uids: set[str], deadline: float) -> None:
        poll = min(1.0, self.settings.evict_retry_s)
        while True:
            left = {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                    for p in self._pods(host, selector, node) if p["metadata"]["uid"] in uids}
            if not left:
                return
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise BackendError(f"kubernetes backend: evict job {job_id} from host {host} (node {node}): "
                                   f"evicted, but still terminating after {self.settings.evict_timeout_s:g}s: "
                                   + ", ".join(sorted(left.values())))
            self._sleep(min(poll, remaining))

    # -- errors --------------------------------------------------------------------------------

    @staticmethod
    def _json(resp: Any) -> dict[str, Any]:
        doc = json.loads(resp.data)
        if not isinstance(doc, dict):
            raise BackendError(f"kubernetes backend: the API server answered {type(doc).__name__}, not an object")
        return doc

    def _api_error(self, what: str, exc: ApiException, hint: str = "") -> BackendError:
        return BackendError(f"kubernetes backend: {what}: HTTP {exc.status} {exc.reason}: {_message(exc)}{hint}")

    def _unreachable(self, what: str, exc: BaseException) -> BackendError:
        host = self._core.api_client.configuration.host
        return BackendError(f"kubernetes backend: {what}: API server {host} unreachable: {one_line(exc)}")


def cordon_patch(node: dict[str, Any], settings: KubernetesSettings, *, host: str, reason: str,
                 incident_id: str, actor: str, at: str) -> dict[str, Any] | None:
    """The merge patch that cordons `node` for vigil, or None when it already is (pure)."""
    keys = _Keys.of(settings.key_prefix)
    meta, spec = node["metadata"], node.get("spec") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    taints = list(spec.get("taints") or [])
    unschedulable = bool(spec.get("unschedulable"))
    has_taint = any(_is_ours(t, settings) for t in taints)
    marked = keys.incident in ann
    if unschedulable and has_taint and marked and labels.get(keys.label) == "true":
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {}}
    new_ann: dict[str, str] = {}
    if not marked:
        new_ann = {keys.by: actor, keys.reason: reason[:_REASON_CHARS], keys.incident: incident_id, keys.at: at,
                   keys.host: host, keys.unschedulable: "false" if unschedulable else "true"}
    if not unschedulable:
        patch["spec"]["unschedulable"] = True
        new_ann[keys.unschedulable] = "true"
    if new_ann:
        patch["metadata"]["annotations"] = new_ann
    if labels.get(keys.label) != "true":
        patch["metadata"]["labels"] = {keys.label: "true"}
    if not has_taint:
        patch["spec"]["taints"] = [*taints, {"key": settings.taint_key, "value": _label_value(incident_id),
                                             "effect": settings.taint_effect}]
    return patch


def uncordon_patch(node: dict[str, Any], settings: KubernetesSettings) -> dict[str, Any] | None:
    """The merge patch that removes vigil's cordon and nothing else, or None when there is none (pure)."""
    keys = _Keys.of(settings.key_prefix)
    meta, spec = node["metadata"], node.get("spec") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if not _is_ours(t, settings)]
    ours_ann = [k for k in keys.annotations() if k in ann]
    if len(kept) == len(taints) and not ours_ann and keys.label not in labels:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {}}
    if ours_ann:
        patch["metadata"]["annotations"] = dict.fromkeys(ours_ann)
    if keys.label in labels:
        patch["metadata"]["labels"] = {keys.label: None}
    if len(kept) != len(taints):
        patch["spec"]["taints"] = kept
    if ann.get(keys.unschedulable) == "true" and spec.get("unschedulable"):
        patch["spec"]["unschedulable"] = None  # the default, false; as `kubectl uncordon` leaves it
    return patch


def _is_ours(taint: dict[str, Any], settings: KubernetesSettings) -> bool:
    return taint.get("key") == settings.taint_key and taint.get("effect") == settings.taint_effect


def _label_value(text: str) -> str:
    """`text` as a valid label (taint) value: other characters become '.', cut to 63."""
    value = re.sub(r"[^A-Za-z0-9_.-]", ".", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_body(exc: ApiException) -> dict[str, Any]:
    try:
        doc = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _message(exc: ApiException) -> str:
    """The API server's own words: the Status message and its causes, else the body's first line."""
    doc = _status_body(exc)
    causes = [c.get("message", "") for c in (doc.get("details") or {}).get("causes") or [] if isinstance(c, dict)]
    text = "; ".join(filter(None, [doc.get("message", ""), *causes])) or str(exc.body or "").strip()
    return one_line(Exception(text), limit=500) if text else "(no message)"


def _retry_after(exc: ApiException) -> float:
    try:
        header = (exc.headers or {}).get("Retry-After")
        if header:
            return float(header)
        return float((_status_body(exc).get("details") or {}).get("retryAfterSeconds") or 0)
    except (TypeError, ValueError):
        return 0.0
