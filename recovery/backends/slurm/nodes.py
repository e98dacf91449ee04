"""Node states and drain reasons as Slurm prints them, read and written (pure).

The rule that keeps vigil from clearing other people's drains lives here: vigil's reasons are
`vigil: <incident id> <cause>` (`PREFIX`), and only a reason with that prefix is ever resumed
by vigil. Any other drain (an operator's "hw check by ops", a health check's) is evidence about
the node, read back, never cleared. Two read formats: `sinfo -h -N -o SINFO_FORMAT` (one line per
node and partition; the reason last, so a `|` in it is harmless) and `scontrol show node -o`
(one line per node; the reason ends with Slurm's own `[user@time]`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

PREFIX = "vigil:"
SINFO_FORMAT = "%N|%T|%H|%u|%E"
_UNSET = {"", "none", "unknown", "(null)", "n/a"}
_MARK = re.compile(r"^(.*?) \[([^@\]\s]+)@(\d{4}-\d\d-\d\dT[\d:]+)\](?=\s|$)")


@dataclass(frozen=True, kw_only=True)
class NodeState:
    name: str
    state: str  # lower case, Slurm's words: "idle", "drained", "draining", "idle+drain", "down*" ...
    reason: str = ""
    user: str = ""  # who set the reason (Slurm records it)
    at: str = ""  # when, ISO 8601 UTC ("" when Slurm does not say)

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm schedules no new work there."""
        return "drain" in self.state

    @property
    def ours(self) -> bool:
        """Drained by vigil: the only drains vigil ever resumes."""
        return self.drained and is_vigil(self.reason)


def is_vigil(reason: str) -> bool:
    return reason.startswith(PREFIX)


def make_reason(incident_id: str, cause: str, *, limit: int = 200) -> str:
    """`vigil: <incident id> <cause>`: one line, no quotes, at most `limit` characters."""
    incident = re.sub(r"\s+", "_", incident_id.strip()) or "-"
    text = re.sub(r"\s+", " ", cause.replace('"', "'")).strip()
    return f"{PREFIX} {incident} {text}".strip()[:limit]


def parse_reason(reason: str) -> tuple[str, str] | None:
    """(incident id, cause) of a vigil reason; None for anyone else's."""
    if not is_vigil(reason):
        return None
    incident, _, cause = reason[len(PREFIX):].strip().partition(" ")
    return ("" if incident == "-" else incident), cause.strip()


def slurm_time(text: str) -> str:
    """Slurm's local `2026-12-07T15:22:35` as ISO 8601 UTC; "" when unknown or unreadable."""
    try:
        local = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").astimezone()
    except ValueError:
        return ""
    return local.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(text: str) -> str:
    return "" if text.strip().lower() in _UNSET else text.strip()


def parse_sinfo(text: str) -> dict[str, NodeState]:
    """`sinfo -h -N -o SINFO_FORMAT` -> node name -> state (a node in several partitions once)."""
    out: dict[str, NodeState] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5:
            raise ValueError(f"sinfo line {line[:200]!r}: expected {SINFO_FORMAT}")
        name, state, at, user, reason = (p.strip() for p in parts)
        out.setdefault(name, NodeState(name=name, state=state.lower(), reason=_value(reason), user=_value(user),
                                       at=slurm_time(at)))
    return out


def parse_scontrol(text: str) -> dict[str, NodeState]:
    """`scontrol show node -o [NAME]` -> node name -> state."""
    out: dict[str, NodeState] = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        head, _, reason_part = line.partition(" Reason=")
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z_]+)=(\S*)", head))
        reason, user, at = reason_part.strip(), "", ""
        if m := _MARK.match(reason):
            reason, user, at = m.group(1), m.group(2), slurm_time(m.group(3))
        name = fields.get("NodeName", "")
        if not name or "State" not in fields:
            raise ValueError(f"scontrol line {line[:200]!r}: no NodeName or State")
        out[name] = NodeState(name=name, state=fields["State"].lower(), reason=_value(reason), user=user, at=at)
    return out
