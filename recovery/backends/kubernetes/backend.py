"""`KubernetesBackend`: the `NodeBackend` calls as API requests (see the package docstring)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.errors import one_line
from vigil.recovery.backends.base import Change, CordonInfo, GpuQuarantine
from vigil.recovery.backends.kubernetes.devicetaints import DeviceTaints
from vigil.recovery.backends.kubernetes.patches import (
    Keys,
    cordon_patch,
    gpu_label,
    label_value,
    parse_gpus,
    uncordon_patch,
)
from vigil.recovery.backends.kubernetes.responses import api_message, retry_after
from vigil.recovery.backends.kubernetes.settings import KubernetesSettings, api_client
from vigil.recovery.errors import BackendError

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubernetesBackend:
    """`NodeBackend` on a Kubernetes cluster; `api` defaults to `api_client(settings)`."""

    name = "kubernetes"
    gpu_quarantine = True  # a node label naming the GPUs + a cordon (no new pods); vigil's agent keeps the others

    def __init__(self, settings: KubernetesSettings, *, api: Any = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._core = client.CoreV1Api(api if api is not None else api_client(settings))
        self._keys = Keys.of(settings.key_prefix)
        self._sleep, self._clock = sleep, clock
        self._dra = DeviceTaints(settings, self._core.api_client, self._api_error, self._unreachable)

    # -- NodeBackend ---------------------------------------------------------------------------

    def cordon(self, host: str, *, reason: str, incident_id: str, actor: str) -> Change:
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            name = node["metadata"]["name"]
            patch = cordon_patch(node, self.settings, host=host, reason=reason, incident_id=incident_id,
                                 actor=actor, at=_now())
            if self._keys.gpus in (node["metadata"].get("labels") or {}):  # a GPU quarantine becomes the host's cordon
                patch = patch or {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
                patch["metadata"].setdefault("labels", {})[self._keys.gpus] = None
            if patch is None:
                ann = node["metadata"].get("annotations") or {}
                return Change(changed=False, data={"node": name},
                              detail=f"node {name} already cordoned by {ann.get(self._keys.by, '?')} for "
                                     f"{ann.get(self._keys.incident, '?')} at {ann.get(self._keys.at, '?')}")
            if self._patch(host, name, patch):
                taint = f"{self.settings.taint_key}={label_value(incident_id)}:{self.settings.taint_effect}"
                at = {**(node["metadata"].get("annotations") or {}), **patch["metadata"].get("annotations", {})}
                return Change(changed=True, detail=f"node {name}: unschedulable, taint {taint}, annotated",
                              data={"node": name, "at": at.get(self._keys.at, "")})
        raise self._conflicted("cordon", host)

    def uncordon(self, host: str, *, reason: str, actor: str) -> Change:
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            name = node["metadata"]["name"]
            patch = uncordon_patch(node, self.settings)
            cleared = self._dra.clear(name) if self._dra.version() is not None else []
            if patch is None and cleared:
                return Change(changed=True, detail=f"node {name}: device taint rules {', '.join(cleared)} deleted",
                              data={"node": name, "device_taint_rules": cleared})
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

    def quarantine(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str, actor: str) -> Change:
        """Where the API server serves DRA device taint rules: one per GPU (`devicetaints`) and the node labelled
        with its quarantined GPUs (`<prefix>quarantined-gpus=0.3`). Else the label and a cordon (no new pods: the
        scheduler cannot hand out single GPUs). vigil's agent there keeps training on the other GPUs."""
        if self._dra.version() is not None:
            return self._taint_devices(host, gpus, reason=reason, incident_id=incident_id, actor=actor)
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            meta, name = node["metadata"], node["metadata"]["name"]
            labels = meta.get("labels") or {}
            if labels.get(self._keys.label) == "true" and self._keys.gpus not in labels:
                return Change(changed=False, detail=f"node {name} is cordoned: its GPUs are out with it",
                              data={"node": name})
            have = parse_gpus(labels.get(self._keys.gpus))
            new = tuple(sorted({*have, *gpus}))
            patch = cordon_patch(node, self.settings, host=host, reason=reason, incident_id=incident_id,
                                 actor=actor, at=_now())
            if patch is None and new == have:
                return Change(changed=False, detail=f"node {name}: GPUs {list(gpus)} already quarantined",
                              data={"node": name, "gpus": list(have)})
            patch = patch or {"metadata": {"resourceVersion": meta["resourceVersion"]}}
            patch["metadata"].setdefault("labels", {})[self._keys.gpus] = gpu_label(new)
            if self._patch(host, name, patch):
                return Change(changed=True, data={"node": name, "gpus": list(new)},
                              detail=f"node {name}: label {self._keys.gpus}={gpu_label(new)}, cordoned for new pods")
        raise self._conflicted("quarantine GPUs of", host)

    def _taint_devices(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str,
                       actor: str) -> Change:
        for _ in range(self.settings.conflict_retries + 1):
            node = self._node(host)
            meta, name = node["metadata"], node["metadata"]["name"]
            made = self._dra.taint(name, gpus, reason=reason, incident_id=incident_id, actor=actor)
            have = parse_gpus((meta.get("labels") or {}).get(self._keys.gpus))
            new = tuple(sorted({*have, *gpus}))
            data = {"node": name, "gpus": list(new), "device_taint_rules": made}
            if new == have:
                return Change(changed=bool(made), data=data, detail=f"node {name}: GPUs {list(gpus)} quarantined"
                              + (f"; device taint rules {', '.join(made)} created" if made else " already"))
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "labels": {self._keys.gpus: gpu_label(new)},
                                  "annotations": {self._keys.host: host}}}
            if self._patch(host, name, patch):
                return Change(changed=True, data=data, detail=f"node {name}: device taint rules "
                              f"{', '.join(made) or '(there already)'}, label {self._keys.gpus}={gpu_label(new)}")
        raise self._conflicted("quarantine GPUs of", host)

    def quarantined(self) -> dict[str, GpuQuarantine]:
        out: dict[str, GpuQuarantine] = {}
        for node in self._list_nodes("list nodes with quarantined GPUs", self._keys.gpus):
            meta = node["metadata"]
            ann, gpus = meta.get("annotations") or {}, parse_gpus((meta.get("labels") or {}).get(self._keys.gpus))
            host = ann.get(self._keys.host) or meta["name"]
            if gpus:
                out[host] = GpuQuarantine(host=host, gpus=gpus, reason=ann.get(self._keys.reason, ""),
                                          incident_id=ann.get(self._keys.incident, ""), by=ann.get(self._keys.by, ""),
                                          at=ann.get(self._keys.at, ""))
        return out

    def cordoned(self) -> dict[str, CordonInfo]:
        """vigil's cordoned nodes by host; a node cordoned for its quarantined GPUs only stays in service for vigil."""
        nodes = self._list_nodes("list cordoned nodes", f"{self._keys.label}=true,!{self._keys.gpus}")
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
            if not LABEL_VALUE.match(host) or len(host) > 63:
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
        if "{job}" in self.settings.pod_selector and (not LABEL_VALUE.match(job_id) or len(job_id) > 63):
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
                return "blocked", api_message(exc), retry_after(exc)
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
        return BackendError(f"kubernetes backend: {what}: HTTP {exc.status} {exc.reason}: {api_message(exc)}{hint}")

    def _unreachable(self, what: str, exc: BaseException) -> BackendError:
        host = self._core.api_client.configuration.host
        return BackendError(f"kubernetes backend: {what}: API server {host} unreachable: {one_line(exc)}")

