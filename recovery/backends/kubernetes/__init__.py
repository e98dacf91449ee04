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

from vigil.recovery.backends.kubernetes.backend import KubernetesBackend
from vigil.recovery.backends.kubernetes.patches import cordon_patch, uncordon_patch
from vigil.recovery.backends.kubernetes.settings import KubernetesSettings, api_client

__all__ = ["KubernetesBackend", "KubernetesSettings", "api_client", "cordon_patch", "uncordon_patch"]
