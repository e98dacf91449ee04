"""Numerical incidents (issue 51): a replica whose parameters differ, a rank whose numbers are wrong, as incidents.

* silent_data_corruption: a `replica_mismatch` finding that names a replica (a strict majority of its replicas
  disagree with it). Its culprit is that rank; the evidence carries the first step it differed at, which the
  controller's replay verdict (recovery/controller/sdc.py) starts from. Cause `unknown` until that verdict: a bad
  GPU, a bad batch or a one-off flip look the same from the digests.
* numeric_fault: a `numeric_fault` finding that names one rank: its local grad norm out of its peers' (`grad_norm`),
  or the first non-finite values of the run on some ranks only (`nonfinite`). A loss spike, or non-finite values on
  every rank at once, names no rank: it stays an alert (a batch, not a host).

Each carries `fault_classes` (`sdc`, `numeric`) in its evidence: the controller's fleet memory counts a host's
repeats of the same class, so transient SDC counted against a host condemns it at `policy.repeat_faults`.
A tie among replicas (`host` `*`) names no one and makes no incident (module analyzer/detect/replicas.py). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from vigil.analyzer.detect.base import Finding
from vigil.analyzer.incidents.draft import Draft, Party
from vigil.contract import IncidentCategory

FAULT_CLASSES = {IncidentCategory.SILENT_DATA_CORRUPTION: "sdc", IncidentCategory.NUMERIC_FAULT: "numeric"}
"""What the controller's fleet memory counts repeats of (recovery/controller/fleetmemory.py): a host named by SDC
again and again is condemned though each replay looked transient and its diagnostics pass."""
KINDS = {"replica_mismatch": IncidentCategory.SILENT_DATA_CORRUPTION, "numeric_fault": IncidentCategory.NUMERIC_FAULT}


def drafts(findings: Sequence[Finding]) -> list[Draft]:
    """One draft per finding of `KINDS` that names its rank."""
    out = []
    for f in findings:
        category = KINDS.get(f.alert)
        rank = f.evidence.get("rank")
        if category is None or f.host == "*" or rank is None or f.evidence.get("every_rank"):
            continue
        keep = ("signal", "step", "good_step", "last_step", "rank", "host", "votes", "replicas", "digest", "majority", "pp", "tp",
                "robust_z", "ranks", "run")
        out.append(Draft(
            category=category, cause="unknown", culprits=[Party(host=f.host, rank=int(rank), at=f.since)], victims=[],
            strong=True, first_sign=f.since, last_sign=f.since, summary=f.summary, culprit_findings=[f],
            evidence={**{k: f.evidence[k] for k in keep if k in f.evidence}, "fault_classes": [FAULT_CLASSES[category]]}))
    return out
