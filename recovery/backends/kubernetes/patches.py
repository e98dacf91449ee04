"""The node patches that cordon and uncordon for vigil, computed from the node as read (pure).

Cordon adds `spec.unschedulable`, vigil's taint, its audit annotations and its index label;
uncordon removes exactly those (and `unschedulable` only when vigil set it), nothing others set.
Both carry the node's `resourceVersion`, so a concurrent writer makes the API server refuse
(409) instead of losing its change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vigil.recovery.backends.kubernetes.settings import KubernetesSettings

REASON_CHARS = 1024  # an annotation is an audit note, not a log


@dataclass(frozen=True)
class Keys:
    by: str
    reason: str
    incident: str
    at: str
    host: str
    unschedulable: str  # "true": vigil set spec.unschedulable; "false": it was already so
    label: str
    gpus: str  # label: the quarantined GPU indices joined by '.' (`0.3`); the node's cordon is then for them

    @classmethod
    def of(cls, prefix: str) -> Keys:
        return cls(*(prefix + s for s in ("cordoned-by", "cordoned-reason", "cordoned-incident", "cordoned-at",
                                          "cordoned-host", "cordoned-unschedulable", "cordoned", "quarantined-gpus")))

    def annotations(self) -> tuple[str, ...]:
        return self.by, self.reason, self.incident, self.at, self.host, self.unschedulable



def cordon_patch(node: dict[str, Any], settings: KubernetesSettings, *, host: str, reason: str,
                 incident_id: str, actor: str, at: str) -> dict[str, Any] | None:
    """The merge patch that cordons `node` for vigil, or None when it already is (pure)."""
    keys = Keys.of(settings.key_prefix)
    meta, spec = node["metadata"], node.get("spec") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    taints = list(spec.get("taints") or [])
    unschedulable = bool(spec.get("unschedulable"))
    has_taint = any(is_ours(t, settings) for t in taints)
    marked = keys.incident in ann
    if unschedulable and has_taint and marked and labels.get(keys.label) == "true":
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {}}
    new_ann: dict[str, str] = {}
    if not marked:
        new_ann = {keys.by: actor, keys.reason: reason[:REASON_CHARS], keys.incident: incident_id, keys.at: at,
                   keys.host: host, keys.unschedulable: "false" if unschedulable else "true"}
    if not unschedulable:
        patch["spec"]["unschedulable"] = True
        new_ann[keys.unschedulable] = "true"
    if new_ann:
        patch["metadata"]["annotations"] = new_ann
    if labels.get(keys.label) != "true":
        patch["metadata"]["labels"] = {keys.label: "true"}
    if not has_taint:
        patch["spec"]["taints"] = [*taints, {"key": settings.taint_key, "value": label_value(incident_id),
                                             "effect": settings.taint_effect}]
    return patch


def uncordon_patch(node: dict[str, Any], settings: KubernetesSettings) -> dict[str, Any] | None:
    """The merge patch that removes vigil's cordon and nothing else, or None when there is none (pure)."""
    keys = Keys.of(settings.key_prefix)
    meta, spec = node["metadata"], node.get("spec") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if not is_ours(t, settings)]
    ours_ann = [k for k in keys.annotations() if k in ann]
    if len(kept) == len(taints) and not ours_ann and keys.label not in labels and keys.gpus not in labels:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {}}
    if ours_ann:
        patch["metadata"]["annotations"] = dict.fromkeys(ours_ann)
    if keys.label in labels or keys.gpus in labels:
        patch["metadata"]["labels"] = {k: None for k in (keys.label, keys.gpus) if k in labels}
    if len(kept) != len(taints):
        patch["spec"]["taints"] = kept
    if ann.get(keys.unschedulable) == "true" and spec.get("unschedulable"):
        patch["spec"]["unschedulable"] = None  # the default, false; as `kubectl uncordon` leaves it
    return patch


def gpu_label(gpus: tuple[int, ...]) -> str:
    """GPU indices as a label value: `0.3`."""
    return ".".join(str(g) for g in sorted(set(gpus)))


def parse_gpus(value: str | None) -> tuple[int, ...]:
    """The indices of a `gpu_label` value; () for none or a value that is not one."""
    parts = (value or "").split(".")
    return tuple(sorted({int(p) for p in parts})) if all(p.isdigit() and len(p) <= 3 for p in parts) else ()


def is_ours(taint: dict[str, Any], settings: KubernetesSettings) -> bool:
    return taint.get("key") == settings.taint_key and taint.get("effect") == settings.taint_effect


def label_value(text: str) -> str:
    """`text` as a valid label (taint) value: other characters become '.', cut to 63."""
    value = re.sub(r"[^A-Za-z0-9_.-]", ".", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
