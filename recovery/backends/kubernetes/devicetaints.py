"""DRA device taints: a GPU quarantine as one `DeviceTaintRule` per GPU, where the API server offers them.

Kubernetes' dynamic resource allocation lets an admin taint single devices (`resource.k8s.io`,
`DeviceTaintRule`: v1 from 1.37, v1beta2, v1alpha3 before, behind the `DRADeviceTaints` gate): a claim that
does not tolerate the taint is not allocated the device (`NoSchedule`). `DeviceTaints.version()` asks the
API server's discovery, once, which of those versions serves `devicetaintrules` (None: none, the backend falls
back to a node label + cordon). A rule selects the DRA driver's device by driver (`dra_driver`), pool (the node's
name: node-local drivers name their pool after the node) and device name (`dra_device`, e.g. `gpu-{index}`);
it is named `<vigil>-<node>-gpu<index>` and labelled with the node, so uncordon deletes exactly vigil's rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.recovery.backends.kubernetes.patches import label_value
from vigil.recovery.backends.kubernetes.settings import KubernetesSettings
from vigil.recovery.errors import BackendError

GROUP, PLURAL = "resource.k8s.io", "devicetaintrules"
VERSIONS = ("v1", "v1beta2", "v1alpha3")  # newest first


class DeviceTaints:
    def __init__(self, settings: KubernetesSettings, api: Any,
                 error: Callable[[str, ApiException], BackendError],
                 unreachable: Callable[[str, BaseException], BackendError]) -> None:
        self.settings = settings
        self._api = client.CustomObjectsApi(api)
        self._error, self._unreachable = error, unreachable
        self._version: str | bool | None = False  # False: not asked yet
        self.node_key = settings.key_prefix + "quarantined-node"

    def version(self) -> str | None:
        """The `resource.k8s.io` version serving device taint rules (None: none, or device taints are off)."""
        if self._version is False:
            self._version = None
            for v in VERSIONS if self.settings.device_taints else ():
                try:
                    found: Any = self._api.get_api_resources(GROUP, v, _preload_content=False,
                                                             _request_timeout=self.settings.request_timeout_s)
                    doc = json.loads(found.data)
                except ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise self._error(f"discover {GROUP}/{v}", exc) from None
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    raise self._unreachable(f"discover {GROUP}/{v}", exc) from None
                if any(r.get("name") == PLURAL for r in doc.get("resources") or []):
                    self._version = v
                    break
        return self._version if isinstance(self._version, str) else None

    def rule(self, node: str, gpu: int, *, reason: str, incident_id: str, actor: str) -> dict[str, Any]:
        s = self.settings
        prefix = label_value(s.key_prefix.split(".")[0].rstrip("/")) or "vigil"
        return {"apiVersion": f"{GROUP}/{self.version()}", "kind": "DeviceTaintRule",
                "metadata": {"name": f"{prefix}-{node}-gpu{gpu}"[:253].lower(),
                             "labels": {self.node_key: label_value(node)},
                             "annotations": {s.key_prefix + "quarantined-by": actor,
                                             s.key_prefix + "quarantined-reason": reason[:1024],
                                             s.key_prefix + "quarantined-incident": incident_id}},
                "spec": {"deviceSelector": {"driver": s.dra_driver, "pool": node,
                                            "device": s.dra_device.format(index=gpu)},
                         "taint": {"key": s.taint_key, "value": label_value(incident_id), "effect": "NoSchedule"}}}

    def taint(self, node: str, gpus: tuple[int, ...], *, reason: str, incident_id: str, actor: str) -> list[str]:
        """Create each GPU's rule; the names of those that were new (an existing one is left as it is)."""
        version, made = self.version(), []
        if version is None:
            raise BackendError("kubernetes backend: the API server serves no device taint rules")
        for gpu in gpus:
            body = self.rule(node, gpu, reason=reason, incident_id=incident_id, actor=actor)
            try:
                self._api.create_cluster_custom_object(GROUP, version, PLURAL, body, _preload_content=False,
                                                       _request_timeout=self.settings.request_timeout_s)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # AlreadyExists: quarantined before
                raise self._error(f"create device taint rule {body['metadata']['name']}", exc) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._unreachable(f"create device taint rule {body['metadata']['name']}", exc) from None
            made.append(str(body["metadata"]["name"]))
        return made

    def clear(self, node: str) -> list[str]:
        """Delete vigil's rules of `node`; their names."""
        version = self.version()
        if version is None:
            return []
        what = f"device taint rules of node {node}"
        try:
            resp: Any = self._api.list_cluster_custom_object(
                GROUP, version, PLURAL, label_selector=f"{self.node_key}={label_value(node)}", _preload_content=False,
                _request_timeout=self.settings.request_timeout_s)
            doc = json.loads(resp.data)
            # the label is the node's name cut to 63 characters: only the rules whose pool is this node
            names = [str(r["metadata"]["name"]) for r in doc.get("items") or []
                     if ((r.get("spec") or {}).get("deviceSelector") or {}).get("pool") == node]
            for name in names:
                try:
                    self._api.delete_cluster_custom_object(GROUP, version, PLURAL, name, _preload_content=False,
                                                           _request_timeout=self.settings.request_timeout_s)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        except ApiException as exc:
            raise self._error(f"delete {what}", exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(f"delete {what}", exc) from None
        return names
