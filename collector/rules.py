"""Log classification rules: ordered (regex -> category, severity), first match wins.

User rules come first (from the `rules` setting or a TOML `rules_file` of `[[rules]]`
tables with `pattern`, `category`, `severity`), then the built-ins below. A rule whose
category is `ignore` silences matching lines. A named group `xid` in the pattern
fills the event's `xid`. Python tracebacks are recognised by `logstream`, not here.

Patterns are RE2 (google-re2): matching takes time linear in the line, whatever the
pattern and the line (no backtracking; lookarounds and backreferences are refused when
a rule is loaded). Callers bound the line too (`logstream.MAX_LINE`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from vigil.contract.severity import SEVERITIES

IGNORE = "ignore"


@dataclass(frozen=True, kw_only=True)
class Rule:
    pattern: Any  # a compiled RE2 pattern (search, groupdict like re's)
    category: str
    severity: str
    keywords: tuple[str, ...] = ()  # lower-case; when set, the regex runs only if one occurs (speed)


@dataclass(frozen=True, kw_only=True)
class Match:
    category: str
    severity: str
    xid: int | None = None


def rule(pattern: str, category: str, severity: str, keywords: tuple[str, ...] = ()) -> Rule:
    """A validated rule; ValueError naming the problem otherwise."""
    if not category or len(category) > 256:
        raise ValueError(f"rule {pattern!r}: category must be 1-256 characters")
    if severity not in SEVERITIES:
        raise ValueError(f"rule {pattern!r}: severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"rule {pattern!r}: not a regular expression RE2 accepts ({exc})") from None
    return Rule(pattern=compiled, category=category, severity=severity, keywords=keywords)


BUILTIN: tuple[Rule, ...] = (
    rule(r"\bXid\b(?:\s*\([^)]*\))?\s*:?\s*(?P<xid>\d+)", "xid", "critical", ("xid",)),
    rule(r"(?i)\b(?:uncorrectable|double[- ]bit|DBE)\b.*\b(?:ECC|memory)\b|\bECC\b.*\berrors?\b"
         r"|row remap(?:ping)? fail", "ecc", "critical", ("ecc", "memory", "row remap")),
    rule(r"(?i)\bnvlink\b.*\b(?:error|fail\w*|down|inactive)\b|\b(?:error|fail\w*)\b.*\bnvlink\b", "nvlink", "critical",
         ("nvlink",)),
    rule(r"(?i)CUDA out of memory|OutOfMemoryError|\bout of memory\b|Cannot allocate memory|oom[-_ ]kill"
         r"|Killed process \d+", "oom", "error", ("memory", "oom", "killed process")),
    rule(r"(?i)Watchdog caught collective operation timeout|\bNCCL\b.*\btimed? ?out\b|ProcessGroupNCCL.*timeout",
         "nccl_timeout", "error", ("watchdog", "nccl")),
    rule(r"Timed out waiting \d+ ?ms|(?i:\bgloo\b.*\btimed? ?out\b)", "collective_timeout", "error",
         ("timed out", "gloo")),
    rule(r"\bNCCL (?:WARN|ERROR)\b|\bnccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error\b"
         r"|NCCL communicator was aborted|\bNCCL error\b", "nccl_error", "error", ("nccl",)),
    rule(r"CUDA error|\bcudaError\w+|(?:CUBLAS|CUDNN)_STATUS_(?:NOT|ALLOC|BAD|INVALID|ARCH|MAPPING|EXECUTION|INTERNAL"
         r"|LICENSE|RUNTIME|VERSION)\w*|device-side assert"
         r"|illegal memory access|CUDA driver error", "cuda_error", "error",
         ("cuda", "cublas", "cudnn", "device-side", "illegal memory")),
    rule(r"(?i)segmentation fault|\bSIG(?:SEGV|ABRT|BUS|FPE|ILL)\b|Fatal Python error|core dumped"
         r"|exited with signal|Signal \d+ \(SIG\w+\) received|Received Signals\.SIG\w+", "signal", "error",
         ("segmentation", "sig", "fatal python", "core dumped")),
)


def rules_from_dicts(items: Iterable[Mapping[str, Any]], source: str = "rules") -> list[Rule]:
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"{source}[{i}]: expected a table with pattern, category, severity")
        unknown = set(item) - {"pattern", "category", "severity"}
        if unknown or "pattern" not in item or "category" not in item:
            raise ValueError(f"{source}[{i}]: expected keys pattern, category, severity (got {sorted(item)})")
        out.append(rule(str(item["pattern"]), str(item["category"]), str(item.get("severity", "error"))))
    return out


def load_rules(user: Sequence[Mapping[str, Any]] = (), rules_file: Path | None = None) -> list[Rule]:
    """User rules (settings first, then the file), followed by the built-ins."""
    rules = rules_from_dicts(user)
    if rules_file is not None:
        try:
            doc = tomllib.loads(rules_file.read_text())
        except OSError as exc:
            raise ValueError(f"rules_file {rules_file}: cannot read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"rules_file {rules_file}: not valid TOML ({exc})") from None
        rules += rules_from_dicts(doc.get("rules", []), source=str(rules_file))
    return rules + list(BUILTIN)


def classify(line: str, rules: Sequence[Rule]) -> Match | None:
    """The first matching rule's category; None for plain output or an `ignore` rule."""
    low = line.lower()
    for r in rules:
        if r.keywords and not any(k in low for k in r.keywords):
            continue
        m = r.pattern.search(line)
        if m is None:
            continue
        if r.category == IGNORE:
            return None
        xid = m.groupdict().get("xid")
        return Match(category=r.category, severity=r.severity, xid=int(xid) if xid and xid.isdigit() else None)
    return None
