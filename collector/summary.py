"""What each rank said last, and torchrun's own failure report: the memory behind exit events.

DLRover-style error-log collection: from the output of the launched command, remember per
rank (the `(rank, local_rank)` key of the line) its last Python traceback and its last
classified error line, each with the time it was printed, and parse torchrun's failure
report: every entry of "Failures:" and the "Root Cause (first observed failure)" (time, rank,
local rank, exit code, pid, signal, error file, message). Lines inside that report are
torchrun quoting its workers: `note_line` says so, and the stream does not classify them
again. `summarize` gives the one-line error of a plain (non-launcher) child. The latest hardware
fault of each category (`HARDWARE_FAULTS`) the kernel log or NVML reported is kept too (`note_fault`,
never from a process's output): a failed command's agent names it in its report (`fault_since`). Pure logic.

Bounded whatever the output: a report starts only where torchrun starts one (its
"Failures:" or "Root Cause" line right after a `----` rule, so a user's own
"Failures:" line changes nothing) and ends after `MAX_REPORT_LINES` at the latest;
an entry quotes at most `MAX_QUOTED` lines; at most `MAX_FAILURES` entries and
`MAX_KEYS` ranks' errors are kept (the oldest go first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

Key = tuple[int | None, int | None]  # (rank, local_rank) of the output line, when known

LAUNCHER_ERRORS = ("ChildFailedError",)
_REPORT_START = re.compile(r"^\s*(?:Failures:\s*$|Root Cause \(first observed failure\))")
_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_ENTRY = re.compile(r"^\s*\[\d+\]:\s*$")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)(?:\s*\(?(SIG\w+)\)?)?")
_ERROR_FILE = re.compile(r"^\s*error_file\s*:\s*(.*)$")
_TRACE = re.compile(r"^\s*traceback\s*:\s*(.*)$")
_FIELD = re.compile(r"^\s*(?:time|host|rank|exitcode|error_file|traceback)\s*:")
_NO_TRACEBACK = "To enable traceback"
_RULE = re.compile(r"^\s*(?:-{10,}|={10,})\s*$")
MAX_REPORT_LINES = 2000
MAX_QUOTED = 64
MAX_FAILURES = 1024
MAX_KEYS = 4096


@dataclass(frozen=True, kw_only=True)
class OwnError:
    """A rank's own error: a whole traceback or one classified line, and when it was printed."""

    text: str
    at: datetime
    is_traceback: bool
    gpus: tuple[int, ...] = ()  # a hardware fault: the GPU indices its record named
    action: str = ""  # a hardware fault: the Xid catalog's action

    @property
    def line(self) -> str:
        return last_line(self.text)


@dataclass(kw_only=True)
class Failure:
    """One entry of torchrun's failure report."""

    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    pid: int | None = None
    signal: str | None = None
    error_file: str | None = None
    message: str = ""
    root: bool = False
    _quoted: list[str] = field(default_factory=list, repr=False)

    @property
    def signal_name(self) -> str | None:
        """SIGTERM for `exitcode: -15`, the name torchrun printed otherwise."""
        if self.signal:
            return self.signal
        if self.exit_code is not None and self.exit_code < 0:
            import signal as _signal

            try:
                return _signal.Signals(-self.exit_code).name
            except ValueError:
                return f"SIG{-self.exit_code}"
        return None


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
    tracebacks: dict[Key, OwnError] = field(default_factory=dict)
    errors: dict[Key, OwnError] = field(default_factory=dict)
    faults: dict[str, OwnError] = field(default_factory=dict)  # hardware category -> its latest line (a closed set)
    failures: list[Failure] = field(default_factory=list)
    _entry: Failure | None = None
    _in_report: bool = False
    _in_root: bool = False
    _after_rule: bool = False
    _report_lines: int = 0

    @property
    def root(self) -> Failure | None:
        return next((f for f in self.failures if f.root), None)

    def note_traceback(self, key: Key, text: str, at: datetime) -> None:
        if any(name in last_line(text) for name in LAUNCHER_ERRORS):
            return  # torchrun's own wrapper: its failure report says more
        _remember(self.tracebacks, key, OwnError(text=text, at=at, is_traceback=True))

    def note_error(self, key: Key, line: str, at: datetime) -> None:
        _remember(self.errors, key, OwnError(text=line, at=at, is_traceback=False))

    def note_fault(self, category: str, line: str, at: datetime, *, gpu: int | None = None, action: str = "") -> None:
        """A hardware fault the kernel log or NVML reported (`HARDWARE_FAULTS`: Xid, ECC, NVLink, GPU lost) whose
        catalog action takes the host out; never a line a training process printed (a claim)."""
        self.faults[category] = OwnError(text=line, at=at, is_traceback=False,
                                         gpus=(gpu,) if gpu is not None else (), action=action)

    def fault_since(self, since: datetime | None) -> tuple[str, OwnError] | None:
        """The first hardware error printed at or after `since` (its category and line): what the failure began with."""
        hits = [(c, e) for c, e in self.faults.items() if since is None or e.at >= since]
        return min(hits, key=lambda ce: ce[1].at) if hits else None

    def note_line(self, line: str) -> bool:
        """Every unprefixed line: True while it belongs to torchrun's failure report (not to classify)."""
        after_rule, self._after_rule = self._after_rule, bool(_RULE.match(line))
        if after_rule and _REPORT_START.search(line):
            self._in_report = True
            self._in_root = bool(_ROOT.search(line))
            self._report_lines = 0
            self._close_entry()
            return True
        if not self._in_report:
            return False
        self._report_lines += 1
        if self._report_lines > MAX_REPORT_LINES:  # no torchrun report is this long: it was not one
            self._close_entry()
            self._in_report = False
            return False
        if line.startswith("=") or line.startswith("-"):
            self._close_entry()
            self._in_report = not line.startswith("=")
            return True
        if _ENTRY.match(line):
            self._close_entry()
            self._entry = Failure(root=self._in_root)
            return True
        entry = self._entry
        if entry is None:
            return True
        if m := _RANK.match(line):
            entry.rank, entry.local_rank = int(m[1]), int(m[2])
        elif m := _EXIT.match(line):
            entry.exit_code, entry.pid, entry.signal = int(m[1]), int(m[2]), m[3]
        elif m := _ERROR_FILE.match(line):
            path = m[1].strip()
            entry.error_file = path if path and not path.startswith("<") else None
        elif m := _TRACE.match(line):
            entry._quoted = [m[1].strip()]
        elif entry._quoted and not _FIELD.match(line):
            entry._quoted.append(line.strip())
            if len(entry._quoted) > MAX_QUOTED:
                del entry._quoted[0]
        return True

    def _close_entry(self) -> None:
        entry, self._entry = self._entry, None
        if entry is None or (entry.rank is None and entry.pid is None):
            return
        quoted = [q for q in entry._quoted if q]
        message = quoted[-1] if quoted else ""
        entry.message = "" if message.startswith(_NO_TRACEBACK) else message[:8192]
        self.failures.append(entry)
        if len(self.failures) > MAX_FAILURES:
            del self.failures[0]

    def own_error(self, rank: int | None, local_rank: int | None, before: datetime | None = None) -> OwnError | None:
        """The rank's last traceback, else its last classified error line (printed before `before`)."""
        for memory in (self.tracebacks, self.errors):
            hits = [e for k, e in memory.items() if _matches(k, rank, local_rank) and (before is None or e.at <= before)]
            if hits:
                return max(hits, key=lambda e: e.at)
        return None


def _remember(memory: dict[Key, OwnError], key: Key, error: OwnError) -> None:
    memory.pop(key, None)
    memory[key] = error  # re-inserted: dict order = recency
    if len(memory) > MAX_KEYS:
        del memory[next(iter(memory))]


def _matches(key: Key, rank: int | None, local: int | None) -> bool:
    k_rank, k_local = key
    if k_rank is not None and rank is not None:
        return k_rank == rank
    return k_rank is None and k_local is not None and k_local == local


def summarize(memory: ErrorMemory) -> Summary:
    """The error of a failed plain child: torchrun's root cause rank when it printed one, else the latest error."""
    root = memory.root
    rank = root.rank if root else None
    local = root.local_rank if root else None
    chosen: tuple[Key, OwnError] | None = None
    if root is not None:
        hits = [(k, t) for k, t in memory.tracebacks.items() if _matches(k, root.rank, root.local_rank)]
        chosen = hits[-1] if hits else None
    if chosen is None and memory.tracebacks:
        chosen = list(memory.tracebacks.items())[-1]
    if chosen is not None:
        (k_rank, k_local), err = chosen
        return Summary(summary=err.line[:8192], traceback=err.text[-65536:],
                       rank=rank if rank is not None else k_rank, local_rank=local if local is not None else k_local)
    if root is not None and root.message:
        return Summary(summary=root.message[:8192], traceback="", rank=rank, local_rank=local)
    if memory.errors:
        (k_rank, k_local), err = list(memory.errors.items())[-1]
        return Summary(summary=err.text[:8192], traceback="", rank=rank if rank is not None else k_rank,
                       local_rank=local if local is not None else k_local)
    return Summary(summary="", traceback="", rank=rank, local_rank=local)
