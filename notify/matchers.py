"""Labels of what can notify (an alert, an incident) and glob matchers over them: shared by routes and silences.

An alert's labels are `job kind severity host subject fingerprint` plus the scalars of its
evidence (`phase`, `xid`, ...); an incident's are `job kind=incident category cause severity
incident_id` and `host`, which holds every culprit's host. A matcher `name=glob` holds when the
label exists and the glob (fnmatch, case-sensitive) matches it, or any of its values.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

from vigil.contract import Alert, Incident

Labels = dict[str, str | tuple[str, ...]]


def _scalars(evidence: Mapping[str, Any]) -> Labels:
    return {k: str(v) for k, v in evidence.items() if isinstance(v, str | int | float | bool)}


def alert_labels(a: Alert) -> Labels:
    out = _scalars(a.evidence)
    out.update(job=a.job_id, kind=a.alert, severity=a.severity, host=a.host, subject=a.subject,
               fingerprint=a.fingerprint)
    return out


def culprit_hosts(i: Incident) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.host for c in i.culprits)) or (i.host,)


def incident_labels(i: Incident) -> Labels:
    out = _scalars(i.evidence)
    out.update(job=i.job_id, kind="incident", category=i.category, cause=i.cause, severity=i.severity,
               host=culprit_hosts(i), incident_id=i.incident_id)
    return out


def glob_matches(pattern: str, value: str | tuple[str, ...] | None) -> bool:
    if value is None:
        return False
    values = value if isinstance(value, tuple) else (value,)
    return any(fnmatchcase(v, pattern) for v in values)


def matches(matchers: Mapping[str, str], labels: Labels) -> bool:
    """Every matcher holds (an empty set of matchers holds for everything)."""
    return all(glob_matches(pattern, labels.get(name)) for name, pattern in matchers.items())


def first(labels: Labels, name: str) -> str:
    """One value of a label: the first of a tuple, '' when absent."""
    value = labels.get(name, "")
    return value[0] if isinstance(value, tuple) else value
