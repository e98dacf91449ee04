"""The exit report of a launched command: one `ProcessExit` per rank process, one for the launcher.

When the launched command is a launcher (torchrun: processes under it carry `RANK`), every
rank process it ran gets its own exit event with its own last error, never a peer's:

* exit code / signal: torchrun's failure report (every failed worker, by pid), else 0 when
  the launcher succeeded or listed other failures only, else unknown (None);
* message, traceback and `failed_at`: the rank's own last traceback as printed (attributed by
  `[defaultN]:` / `[rankN]:` prefixes, with the time it was printed), else its
  `TORCHELASTIC_ERROR_FILE` (written by `@record`: message, call stack, 1 s timestamp), else
  its last classified error line, else what torchrun's report says (e.g. "Signal 15 (SIGTERM)
  received by PID 42");
* `ts`: when the agent saw the process gone.

The launcher's own event (`launcher=True`, no rank) carries the launcher's exit status and
names its first failing rank by time, as torchrun's "Root Cause (first observed failure)"
does for its node. A command that is not a launcher gets one event, as before: its error
summary and the rank it says it is. Pure logic, but for reading error files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vigil.collector.procs import Worker
from vigil.collector.summary import ErrorMemory, Failure, OwnError, last_line, summarize
from vigil.contract import ProcessExit

log = logging.getLogger(__name__)
MAX_ERROR_FILE_BYTES = 1 << 20
GONE_SLACK = timedelta(seconds=5)  # output of a dying process may be read a moment after it is seen gone


@dataclass(frozen=True, kw_only=True)
class ErrorFile:
    """A torchelastic error file (`@record`): the exception line, its call stack, when (1 s)."""

    message: str
    traceback: str
    at: datetime | None


def read_error_file(path: str) -> ErrorFile | None:
    """The error file at `path`; None when it is missing or not one (never raises)."""
    try:
        p = Path(path)
        if p.stat().st_size > MAX_ERROR_FILE_BYTES:
            return None
        doc = json.loads(p.read_text(errors="replace"))
        msg = doc["message"]
        if isinstance(msg, str):
            return ErrorFile(message=last_line(msg), traceback="", at=None)
        extra = msg.get("extraInfo") or {}
        stamp = extra.get("timestamp")
        at = datetime.fromtimestamp(int(str(stamp)), UTC) if str(stamp or "").isdigit() else None
        return ErrorFile(message=last_line(str(msg.get("message", ""))), traceback=str(extra.get("py_callstack", "")),
                         at=at)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.debug("error file %s unreadable: %s", path, exc)
        return None


def _status(returncode: int) -> tuple[int | None, str | None]:
    if returncode >= 0:
        return returncode, None
    import signal as _signal

    try:
        return None, _signal.Signals(-returncode).name
    except ValueError:
        return None, f"SIG{-returncode}"


def _failure_of(w: Worker, failures: Sequence[Failure]) -> Failure | None:
    by_pid = [f for f in failures if f.pid == w.pid]
    if by_pid:
        return by_pid[-1]
    return next((f for f in failures if f.pid is None and f.rank == w.rank), None)


def _worker_exit(w: Worker, *, job_id: str, host: str, memory: ErrorMemory, failures: Sequence[Failure],
                 launcher_ok: bool, restarted: bool, now: datetime,
                 read_error: Callable[[str], ErrorFile | None]) -> ProcessExit:
    failure = _failure_of(w, failures)
    if failure is not None:
        code = failure.exit_code if failure.exit_code is not None and failure.exit_code >= 0 else None
        sig = failure.signal_name
    elif launcher_ok or (failures and not restarted):
        code, sig = 0, None  # torchrun lists every failed worker of its last attempt
    else:
        code, sig = None, None
    before = (w.gone_at + GONE_SLACK) if (restarted and w.gone_at is not None) else None
    own: OwnError | None = memory.own_error(w.rank, w.local_rank, before=before)
    file = read_error(failure.error_file) if failure is not None and failure.error_file else None
    failed_at: datetime | None
    if own is not None and own.is_traceback:
        summary, traceback, failed_at = own.line, own.text, own.at
    elif file is not None and file.message:
        summary, traceback, failed_at = file.message, file.traceback, file.at or (own.at if own else None)
    elif own is not None:
        summary, traceback, failed_at = own.line, "", own.at
    else:
        summary, traceback, failed_at = (failure.message if failure else ""), "", None
    if code == 0 and sig is None:
        summary, traceback, failed_at = "", "", None
    return ProcessExit(job_id=job_id, host=host, ts=w.gone_at or now, pid=w.pid, rank=w.rank, local_rank=w.local_rank,
                       exit_code=code, signal=sig, summary=summary[:8192], traceback=traceback[-65536:],
                       failed_at=failed_at)


def _failed(e: ProcessExit) -> bool:
    return bool(e.signal) or (e.exit_code is not None and e.exit_code != 0)


def first_failure(exits: Sequence[ProcessExit]) -> ProcessExit | None:
    """The rank exit that failed first: by when its own error was printed, else when it was seen gone."""
    failed = [e for e in exits if _failed(e) and not e.launcher]
    return min(failed, key=lambda e: (e.failed_at or e.ts, e.ts)) if failed else None


def launcher_summary(first: ProcessExit | None) -> str:
    if first is None:
        return ""
    where = f"rank {first.rank} (local rank {first.local_rank})" if first.local_rank is not None else f"rank {first.rank}"
    what = first.summary or (f"signal {first.signal}" if first.signal else f"exit code {first.exit_code}")
    return f"{where} failed first: {what}"


def _workers_with_reported(workers: Sequence[Worker], failures: Sequence[Failure], now: datetime) -> list[Worker]:
    """The tracker's workers plus those only torchrun's report knows (a rank that lived too briefly to be seen)."""
    out = list(workers)
    pids = {w.pid for w in out}
    for f in failures:
        if f.rank is not None and f.pid is not None and f.pid not in pids:
            out.append(Worker(pid=f.pid, rank=f.rank, local_rank=f.local_rank, restart=None, seen_at=now, gone_at=now))
            pids.add(f.pid)
    return out


def launched_exits(*, job_id: str, host: str, memory: ErrorMemory, workers: Sequence[Worker], child_pid: int,
                   returncode: int, now: datetime,
                   read_error: Callable[[str], ErrorFile | None] = read_error_file) -> list[ProcessExit]:
    """The exit events of a launched command that ended with `returncode` (a Popen returncode)."""
    code, sig = _status(returncode)
    ranks = [w for w in _workers_with_reported(workers, memory.failures, now) if w.pid != child_pid]
    if not ranks:  # not a launcher: the child is the process that trains
        summary = summarize(memory) if returncode != 0 else None
        own = memory.own_error(summary.rank, summary.local_rank) if summary else None
        me = next((w for w in workers if w.pid == child_pid), None)
        rank = summary.rank if summary and summary.rank is not None else (me.rank if me else None)
        local = summary.local_rank if summary and summary.local_rank is not None else (me.local_rank if me else None)
        return [ProcessExit(job_id=job_id, host=host, ts=now, pid=child_pid, exit_code=code, signal=sig, rank=rank,
                            local_rank=local, summary=summary.summary if summary else "",
                            traceback=summary.traceback if summary else "",
                            failed_at=own.at if own is not None and summary and summary.summary else None)]
    latest: dict[int, Worker] = {}
    for w in ranks:
        latest[w.rank] = w  # seen in order: the last incarnation of each rank wins
    exits = [_worker_exit(w, job_id=job_id, host=host, memory=memory, failures=memory.failures,
                          launcher_ok=returncode == 0, restarted=latest[w.rank] is not w, now=now, read_error=read_error)
             for w in ranks]
    first = first_failure(exits)
    exits.append(ProcessExit(job_id=job_id, host=host, ts=now, pid=child_pid, exit_code=code, signal=sig,
                             launcher=True, summary=launcher_summary(first) if returncode != 0 else "",
                             failed_at=(first.failed_at or first.ts) if first is not None and returncode != 0 else None))
    return exits
