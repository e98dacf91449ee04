"""Slurm hostlists (`node[01-03,07],gpu-a[1-2]`) as node names, and node names as an exclude list (pure).

`scontrol show hostnames` is the authority where Slurm is reachable; this parser covers the
forms allocations carry (`SLURM_JOB_NODELIST`): comma-separated names, each with at most one
bracket of numbers and ranges, zero padding kept (`n[08-10]` -> n08 n09 n10). Anything else
(nested or several brackets, a reversed range) is a `ValueError`, never a guess.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_NAMES = 65536  # a hostlist is bounded: `n[0-999999999]` is refused, not expanded


def split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {text!r}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {text!r}: ']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"hostlist {text!r}: '[' without ']'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def expand(hostlist: str) -> list[str]:
    """The node names of `hostlist`, in order, without duplicates."""
    out: list[str] = []
    for part in split_top(hostlist.strip()):
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part or "]" in part:
                raise ValueError(f"hostlist {hostlist!r}: cannot read {part!r}")
            out.append(part)
            continue
        head, body, tail = m.groups()
        for item in body.split(","):
            r = _RANGE.match(item.strip())
            if r is None:
                raise ValueError(f"hostlist {hostlist!r}: {item!r} is not a number or range")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            if int(hi) < int(lo):
                raise ValueError(f"hostlist {hostlist!r}: reversed range {item!r}")
            if len(out) + int(hi) - int(lo) >= MAX_NAMES:
                raise ValueError(f"hostlist {hostlist!r}: more than {MAX_NAMES} names")
            width = len(lo) if lo.startswith("0") else 0
            out.extend(f"{head}{n:0{width}d}{tail}" for n in range(int(lo), int(hi) + 1))
    return list(dict.fromkeys(out))


def exclude_arg(nodes: set[str] | list[str]) -> str:
    """`--exclude` value: the names, sorted, comma-separated (Slurm accepts plain names)."""
    return ",".join(sorted(set(nodes)))
