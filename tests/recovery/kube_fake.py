"""A fake Kubernetes API server for the node backend's tests: the real HTTP API, a tiny state.

A threaded `http.server` on a free loopback port that answers the requests the official
`kubernetes` client makes for cordon, taint, annotations, eviction and listing, with the API
server's JSON shapes (`kind`, `apiVersion`, `metadata.resourceVersion`, list kinds whose items
carry no kind, `Status` bodies for every error):

    GET   /api/v1/nodes[?labelSelector=&fieldSelector=]          NodeList
    GET   /api/v1/nodes/{name}                                   Node | 404
    PATCH /api/v1/nodes/{name}                                   merge-patch / strategic-merge-patch
    GET   /api/v1/pods[?labelSelector=&fieldSelector=]           PodList (all namespaces)
    GET   /api/v1/namespaces/{ns}/pods[?...]                     PodList
    POST  /api/v1/namespaces/{ns}/pods/{name}/eviction           201 Status | 429 (PDB) | 404
    GET   /apis/resource.k8s.io/{v}                              APIResourceList (devicetaintrules) when `dra` = v
    GET | POST  /apis/resource.k8s.io/{v}/devicetaintrules       DeviceTaintRuleList | created | 409 AlreadyExists
    DELETE /apis/resource.k8s.io/{v}/devicetaintrules/{name}     the deleted rule | 404

Like the API server: a patch carrying `metadata.resourceVersion` is refused with 409 when the
object changed since (optimistic concurrency); an eviction whose body names another pod is a
400; a PodDisruptionBudget refusal is a 429 `TooManyRequests` Status with a `DisruptionBudget`
cause. Strategic merge is applied as JSON merge (RFC 7386), which is exact for the node fields
vigil patches (string maps and `spec.taints`, an atomic list); `$patch` directives are refused.

Tests arrange the cluster (`add_node`, `add_pod`), inject faults (`block_eviction`: N 429s
first, or forever; `fail`: a status for matching requests) and assert on `requests`, every
request as received (method, path, query, headers, JSON body).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            409: "Conflict", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable"}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    status: int
    message: str
    times: int | None  # None: every matching request


@dataclass
class _Block:
    remaining: int | None  # 429s still to answer; None: forever
    pdb: str
    retry_after_s: int | None
    answered: int = 0


@dataclass
class FakeKube:
    """The fake cluster and its server; use as a context manager (`with FakeKube() as kube`)."""

    token: str | None = None  # when set, requests must carry `Authorization: Bearer <token>`
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    evict_linger: int = 0  # an evicted pod stays (terminating) for this many pod lists, then is deleted
    dra: str | None = None  # the resource.k8s.io version serving device taint rules (None: DRA taints not offered)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # DeviceTaintRules by name

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._rv = itertools.count(1000)
        self._blocks: dict[tuple[str, str], _Block] = {}
        self._failures: list[_Failure] = []
        self._lingering: dict[tuple[str, str], int] = {}
        self._vanishing: set[tuple[str, str]] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- arrangement ---------------------------------------------------------------------------

    def add_node(self, name: str, *, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                 unschedulable: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24"}
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if unschedulable:
            spec["unschedulable"] = True
        node = {"kind": "Node", "apiVersion": "v1",
                "metadata": self._meta(name, None, {"kubernetes.io/hostname": name, **(labels or {})}, annotations),
                "spec": spec,
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
        with self.lock:
            self.nodes[name] = node
        return node

    def add_pod(self, namespace: str, name: str, *, node: str, labels: dict[str, str] | None = None,
                phase: str = "Running") -> dict[str, Any]:
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": self._meta(name, namespace, labels, None),
               "spec": {"nodeName": node, "containers": [{"name": "trainer", "image": "trainer:1"}]},
               "status": {"phase": phase}}
        with self.lock:
            self.pods[(namespace, name)] = pod
        return pod

    def block_eviction(self, namespace: str, name: str, *, times: int | None, pdb: str = "trainer-pdb",
                       retry_after_s: int | None = None) -> None:
        """Answer the pod's next `times` evictions (None: all) with the PDB's 429."""
        with self.lock:
            self._blocks[(namespace, name)] = _Block(times, pdb, retry_after_s)

    def vanish_after_list(self, namespace: str, name: str) -> None:
        """The pod is in the next pod list, then deleted (by its own controller, say) before anything else."""
        with self.lock:
            self._vanishing.add((namespace, name))

    def blocked_answers(self, namespace: str, name: str) -> int:
        with self.lock:
            block = self._blocks.get((namespace, name))
            return block.answered if block else 0

    def fail(self, method: str, path: str, status: int, message: str = "", *, times: int | None = None) -> None:
        """Answer requests whose method matches and whose path matches the regex `path` with `status`."""
        with self.lock:
            self._failures.append(_Failure(method.upper(), re.compile(path), status, message, times))

    def node(self, name: str) -> dict[str, Any]:
        with self.lock:
            return json.loads(json.dumps(self.nodes[name]))  # type: ignore[no-any-return]

    def sent(self, method: str, path_prefix: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]

    # -- server --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            kube = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-kube", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # -- the API -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(Recorded(method, path, query, headers, body))
            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                return _status(401, "Unauthorized")
            for f in self._failures:
                if f.method == method and f.path.search(path) and f.times != 0:
                    if f.times is not None:
                        f.times -= 1
                    return _status(f.status, f.message or _REASONS.get(f.status, "error"))
            return self._route(method, path, query, headers, body)

    def _route(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        parts = path.strip("/").split("/")
        if parts[:2] == ["apis", "resource.k8s.io"]:
            return self._resource(method, parts[2:], query, body)
        if parts[:2] != ["api", "v1"]:
            return _status(404, "the server could not find the requested resource")
        rest = parts[2:]
        if rest == ["nodes"] and method == "GET":
            return self._list("NodeList", list(self.nodes.values()), query)
        if len(rest) == 2 and rest[0] == "nodes":
            node = self.nodes.get(rest[1])
            if node is None:
                return _status(404, f'nodes "{rest[1]}" not found', details={"name": rest[1], "kind": "nodes"})
            if method == "GET":
                return 200, node, {}
            if method == "PATCH":
                return self._patch_node(node, headers.get("content-type", ""), body)
            return _status(405, f"method {method} not allowed on nodes")
        if rest == ["pods"] and method == "GET":
            return self._list_pods(None, query)
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "pods" and method == "GET":
            return self._list_pods(rest[1], query)
        if len(rest) == 5 and rest[0] == "namespaces" and rest[2] == "pods" and rest[4] == "eviction":
            if method != "POST":
                return _status(405, f"method {method} not allowed on pods/eviction")
            return self._evict(rest[1], rest[3], body)
        return _status(404, "the server could not find the requested resource")

    def _resource(self, method: str, rest: list[str], query: dict[str, str],
                  body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        if not rest or rest[0] != self.dra:
            return _status(404, "the server could not find the requested resource")
        if len(rest) == 1 and method == "GET":
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"resource.k8s.io/{self.dra}",
                         "resources": [{"name": "devicetaintrules", "singularName": "devicetaintrule",
                                        "namespaced": False, "kind": "DeviceTaintRule",
                                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}, {}
        if rest[1:] == ["devicetaintrules"] and method == "GET":
            return self._list("DeviceTaintRuleList", list(self.rules.values()), query)
        if rest[1:] == ["devicetaintrules"] and method == "POST":
            name = str(body["metadata"]["name"])
            if name in self.rules:
                return _status(409, f'devicetaintrules.resource.k8s.io "{name}" already exists')
            meta = self._meta(name, None, body["metadata"].get("labels"), body["metadata"].get("annotations"))
            self.rules[name] = {**body, "metadata": meta}
            return 201, self.rules[name], {}
        if len(rest) == 3 and rest[1] == "devicetaintrules" and method == "DELETE":
            gone = self.rules.pop(rest[2], None)
            return (200, gone, {}) if gone is not None else _status(404, f'"{rest[2]}" not found')
        return _status(404, "the server could not find the requested resource")

    def _list(self, kind: str, objects: list[dict[str, Any]], query: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        try:
            labels = _label_selector(query.get("labelSelector", ""))
            fields = _field_selector(query.get("fieldSelector", ""))
        except ValueError as exc:
            return _status(400, str(exc))
        items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objects
                 if all(m(o["metadata"].get("labels") or {}) for m in labels) and all(m(o) for m in fields)]
        return 200, {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(next(self._rv))},
                     "items": items}, {}

    def _list_pods(self, namespace: str | None, query: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        for key, left in list(self._lingering.items()):  # terminating pods finish after a few looks
            if left <= 0:
                del self._lingering[key]
                self.pods.pop(key, None)
            else:
                self._lingering[key] = left - 1
        pods = [p for (ns, _), p in self.pods.items() if namespace is None or ns == namespace]
        listed = self._list("PodList", pods, query)
        for key in self._vanishing:
            self.pods.pop(key, None)
        self._vanishing.clear()
        return listed

    def _patch_node(self, node: dict[str, Any], content_type: str, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        media = content_type.split(";")[0].strip()
        if media not in MERGE_TYPES:
            return _status(415, f"the body of the request was in an unknown format - accepted media types "
                                f"include: {', '.join(MERGE_TYPES)} (this fake)")
        if not isinstance(body, dict):
            return _status(400, "the patch is not a JSON object")
        if _has_directive(body):
            return _status(400, "strategic merge directives are not supported by this fake")
        name = node["metadata"]["name"]
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != node["metadata"]["resourceVersion"]:
            return _status(409, f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                                "please apply your changes to the latest version and try again",
                           details={"name": name, "kind": "nodes"})
        merged = _merge(node, body)
        merged["metadata"]["name"] = name
        merged["metadata"]["uid"] = node["metadata"]["uid"]
        merged["metadata"]["resourceVersion"] = str(next(self._rv))
        merged["kind"], merged["apiVersion"] = "Node", "v1"
        self.nodes[name] = merged
        return 200, merged, {}

    def _evict(self, namespace: str, name: str, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            return _status(400, "the body is not an Eviction")
        meta = body.get("metadata") or {}
        if meta.get("name") != name or meta.get("namespace", namespace) != namespace:
            return _status(400, "name in URL does not match name in Eviction object")
        pod = self.pods.get((namespace, name))
        if pod is None:
            return _status(404, f'pods "{name}" not found', details={"name": name, "kind": "pods"})
        block = self._blocks.get((namespace, name))
        if block is not None and block.remaining != 0:
            if block.remaining is not None:
                block.remaining -= 1
            block.answered += 1
            headers = {"Retry-After": str(block.retry_after_s)} if block.retry_after_s is not None else {}
            code, status, _ = _status(
                429, "Cannot evict pod as it would violate the pod's disruption budget.",
                details={"causes": [{"reason": "DisruptionBudget",
                                     "message": f"The disruption budget {block.pdb} needs 2 healthy pods and has 2 currently"}]})
            return code, status, headers
        if self.evict_linger > 0:
            if "deletionTimestamp" not in pod["metadata"]:
                pod["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:00Z"
                pod["metadata"]["resourceVersion"] = str(next(self._rv))
                self._lingering[(namespace, name)] = self.evict_linger
        else:
            del self.pods[(namespace, name)]
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, {}

    def _meta(self, name: str, namespace: str | None, labels: dict[str, str] | None,
              annotations: dict[str, str] | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": str(next(self._rv)),
                                "creationTimestamp": "2026-11-23T10:00:00Z"}
        if namespace is not None:
            meta["namespace"] = namespace
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        return meta


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            code, out, extra = _status(400, "the request body is not JSON")
        else:
            headers = {k.lower(): v for k, v in self.headers.items()}
            code, out, extra = self.kube.handle(self.command, url.path, query, headers, body)
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def _status(code: int, message: str, *, details: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": _REASONS.get(code, "Unknown"), "code": code}
    if details:
        body["details"] = details
    return code, body, {}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return json.loads(json.dumps(patch))
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _has_directive(patch: Any) -> bool:
    if isinstance(patch, dict):
        return any(k.startswith("$") or _has_directive(v) for k, v in patch.items())
    if isinstance(patch, list):
        return any(_has_directive(v) for v in patch)
    return False


def _label_selector(text: str) -> list[Any]:
    """Equality-based selectors and existence: `a=b`, `a==b`, `a!=b`, `a`, `!a`, comma-separated."""
    out: list[Any] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if " in " in term or " notin " in term or "(" in term:
            raise ValueError(f"unable to parse requirement: set-based selectors are not supported by this fake: {term}")
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append(lambda labels, k=k.strip(), v=v.strip(): labels.get(k) != v)
        elif "=" in term:
            k, v = re.split("==?", term, maxsplit=1)
            out.append(lambda labels, k=k.strip(), v=v.strip(): labels.get(k) == v)
        elif term.startswith("!"):
            out.append(lambda labels, k=term[1:].strip(): k not in labels)
        else:
            out.append(lambda labels, k=term: k in labels)
    return out


_FIELDS = {"metadata.name": lambda o: o["metadata"]["name"],
           "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
           "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
           "spec.unschedulable": lambda o: str(bool(o.get("spec", {}).get("unschedulable"))).lower(),
           "status.phase": lambda o: o.get("status", {}).get("phase", "")}


def _field_selector(text: str) -> list[Any]:
    out: list[Any] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        negate = "!=" in term
        k, v = re.split("!=|==?", term, maxsplit=1)
        if k not in _FIELDS:
            raise ValueError(f'field label not supported: {k}')
        get = _FIELDS[k]
        out.append(lambda o, get=get, v=v, negate=negate: (get(o) != v) if negate else (get(o) == v))
    return out
