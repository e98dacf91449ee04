"""The error summary of a failed run: which rank failed and its last error.

DLRover-style error-log collection: from the child's output, remember each rank's last
Python traceback and last classified error line, and parse torchrun's own failure
report ("Root Cause (first observed failure): rank : 1 (local_rank: 1) exitcode : 3
(pid: 123)"). `summarize` picks the root-cause rank's traceback when torchrun named
one, else the latest traceback, else the latest error line. Pure logic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Key = tuple[int | None, int | None]  # (rank, local_rank) of the output line, when known

LAUNCHER_ERRORS = ("ChildFailedError",)
_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)(?:\s*(SIG\w+))?")
_TRACE = re.compile(r"^\s*traceback\s*:\s*(.*)$")


@dataclass(kw_only=True)
class RootCause:
    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    pid: int | None = None
    signal: str | None = None
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Summary:
    summary: str
    traceback: str
    rank: int | None
    local_rank: int | None


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


@dataclass(kw_only=True)
class ErrorMemory:
    tracebacks: dict[Key, str] = field(default_factory=dict)
    errors: dict[Key, str] = field(default_factory=dict)
    root: RootCause | None = None
    _in_root: bool = False

    def note_traceback(self, key: Key, text: str) -> None:
        if any(name in last_line(text) for name in LAUNCHER_ERRORS):
            return  # torchrun's own wrapper: the root cause block says more
        self.tracebacks.pop(key, None)
        self.tracebacks[key] = text  # re-inserted: dict order = recency

    def note_error(self, key: Key, line: str) -> None:
        self.errors.pop(key, None)
        self.errors[key] = line

    def note_line(self, line: str) -> None:
        """Every unprefixed line: looks for torchrun's failure report."""
        if _ROOT.search(line):
            self.root, self._in_root = RootCause(), True
            return
        if not self._in_root or self.root is None:
            return
        if m := _RANK.match(line):
            self.root.rank, self.root.local_rank = int(m[1]), int(m[2])
        elif m := _EXIT.match(line):
            self.root.exit_code, self.root.pid, self.root.signal = int(m[1]), int(m[2]), m[3]
        elif m := _TRACE.match(line):
            self.root.message = m[1].strip()
        elif line.startswith("="):
            self._in_root = False


def _matches(key: Key, root: RootCause) -> bool:
    rank, local = key
    if rank is not None and root.rank is not None:
        return rank == root.rank
    return local is not None and local == root.local_rank


def summarize(memory: ErrorMemory) -> Summary:
    root = memory.root
    rank = root.rank if root else None
    local = root.local_rank if root else None
    chosen: tuple[Key, str] | None = None
    if root is not None:
        hits = [(k, t) for k, t in memory.tracebacks.items() if _matches(k, root)]
        chosen = hits[-1] if hits else None
    if chosen is None and memory.tracebacks:
        chosen = list(memory.tracebacks.items())[-1]
    if chosen is not None:
        (k_rank, k_local), text = chosen
        return Summary(summary=last_line(text)[:8192], traceback=text[-65536:],
                       rank=rank if rank is not None else k_rank, local_rank=local if local is not None else k_local)
    if root is not None and root.message and not root.message.startswith("To enable traceback"):
        return Summary(summary=root.message[:8192], traceback="", rank=rank, local_rank=local)
    if memory.errors:
        (k_rank, k_local), line = list(memory.errors.items())[-1]
        return Summary(summary=line[:8192], traceback="", rank=rank if rank is not None else k_rank,
                       local_rank=local if local is not None else k_local)
    return Summary(summary="", traceback="", rank=rank, local_rank=local)
