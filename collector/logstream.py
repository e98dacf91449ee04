"""One output stream of a training process -> classified LogLine events.

Each line: torchrun's rank prefixes (`[default3]:` = local rank 3 of role `default`, from
`--tee`; `[rank5]:` = global rank 5, torch's excepthook on uncaught tracebacks; both nest as
`[default1]:[rank5]: ...`) are parsed and stripped; Python tracebacks are assembled (header,
indented frames, exception line) into one `traceback` event; other lines are classified by
`rules` and plain output yields nothing. Lines of torchrun's failure report quote its
workers' errors: they are parsed into the error memory, never classified a second time.
Events of one line share its arrival time, which the memory keeps as the time each rank's
error was printed. Events pass a per-(category, rank) flood limiter. Pure logic: the caller
feeds lines and passes the clock.

A line is classified on its first `MAX_LINE` characters at most: a longer one is cut, marked
`…[N chars cut]` and counted (`truncated`), so the work per line is bounded (the rules are
RE2: linear in that bound). A rank prefix is at most 7 digits (a longer one is text of the line,
classified with it), and at most `MAX_OPEN_TRACEBACKS` tracebacks are assembled at once per stream
(one per rank prefix): a further one ends the oldest.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from vigil.collector.flood import FloodLimiter
from vigil.collector.rules import Rule, classify
from vigil.collector.summary import ErrorMemory, Key, last_line
from vigil.contract import LogLine, new_event_id, utcnow

if TYPE_CHECKING:
    from datetime import datetime

PREFIX = re.compile(r"^\[(?P<role>[A-Za-z_]{1,32})(?P<n>\d{1,7})\]:\s?")  # a longer one is not a prefix: the line
MAX_OPEN_TRACEBACKS = 64  # per stream; one more ends the oldest (as if its exception line had come)
MAX_PREFIXES = 2
TRACEBACK_HEADER = "Traceback (most recent call last):"
MAX_LINE = 8192
MAX_TRACEBACK_LINES = 400

RankOf = Callable[[int], int | None]  # local rank -> global rank, when known


def split_prefix(line: str) -> tuple[int | None, int | None, str]:
    """(rank, local_rank, rest): `[rank3]:` names a global rank, `[<role>3]:` a local one; both may nest."""
    rank: int | None = None
    local: int | None = None
    rest = line
    for _ in range(MAX_PREFIXES):
        m = PREFIX.match(rest)
        if m is None:
            break
        n = int(m["n"])
        if m["role"] == "rank" and rank is None:
            rank = n
        elif m["role"] != "rank" and local is None:
            local = n
        else:
            break
        rest = rest[m.end():]
    return rank, local, rest


class LogStream:
    """Feed lines of one stream (stdout or stderr) of one process or log file."""

    def __init__(
        self, *, job_id: str, host: str, stream: Literal["stdout", "stderr"], rules: Sequence[Rule],
        memory: ErrorMemory | None = None, rank: int | None = None, local_rank: int | None = None,
        rank_of: RankOf | None = None, flood_burst: int = 20, flood_window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_id, self.host, self.stream, self.rules = job_id, host, stream, rules
        self.memory = memory if memory is not None else ErrorMemory()
        self.rank, self.local_rank, self.rank_of, self.clock = rank, local_rank, rank_of, clock
        self.limiter: FloodLimiter[LogLine] = FloodLimiter(burst=flood_burst, window_s=flood_window_s)
        self._tracebacks: dict[Key, list[str]] = {}
        self._lock = threading.Lock()
        self.lines = 0
        self.truncated = 0

    def feed(self, raw: str | bytes, at: datetime | None = None) -> list[LogLine]:
        """Classify one line; `at` is when it arrived (now when not given)."""
        with self._lock:
            return self._feed(raw, at)

    def _feed(self, raw: str | bytes, at: datetime | None) -> list[LogLine]:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if len(line) > MAX_LINE:
            self.truncated += 1
            line = f"{line[:MAX_LINE]}…[{len(line) - MAX_LINE} chars cut]"
        self.lines += 1
        rank, local, text = split_prefix(line)
        if rank is None and local is None:
            rank, local = self.rank, self.local_rank
            if self.memory.note_line(text):
                return []  # torchrun's failure report, quoting errors already seen in its workers' output
        if rank is None and local is not None and self.rank_of is not None:
            rank = self.rank_of(local)
        key: Key = (rank, local)
        now = at if at is not None else utcnow()
        out: list[LogLine] = []
        collecting = self._tracebacks.get(key)
        if collecting is not None:
            if not text or text[0].isspace() or text.startswith("^"):
                if len(collecting) < MAX_TRACEBACK_LINES:
                    collecting.append(text)
                return out
            collecting.append(text)  # the exception line ends the traceback
            out += self._traceback_done(key, now)
        elif text.startswith(TRACEBACK_HEADER):
            if len(self._tracebacks) >= MAX_OPEN_TRACEBACKS:
                out += self._traceback_done(next(iter(self._tracebacks)), now)
            self._tracebacks[key] = [text]
            return out
        match = classify(text, self.rules)
        if match is not None:
            self.memory.note_error(key, text.strip(), now)  # a hardware line printed here is a claim, never a fault
            event = self._event(key, match.category, match.severity, text, match.xid, now)
            out += self._limit(event)
        return out

    def tick(self) -> list[LogLine]:
        """Flood summaries of windows that have ended; call about once a second."""
        with self._lock:
            return [self._repeat(e, n) for e, n in self.limiter.due(self.clock())]

    def close(self) -> list[LogLine]:
        """End of stream: unfinished tracebacks and open flood windows."""
        with self._lock:
            out: list[LogLine] = []
            for key in list(self._tracebacks):
                out += self._traceback_done(key, utcnow())
            return out + [self._repeat(e, n) for e, n in self.limiter.drain()]

    def _traceback_done(self, key: Key, now: datetime) -> list[LogLine]:
        lines = self._tracebacks.pop(key)
        text = "\n".join(lines)
        self.memory.note_traceback(key, text, now)
        if "ChildFailedError" in last_line(text):
            return []
        return self._limit(self._event(key, "traceback", "error", text[-8192:], None, now))

    def _event(self, key: Key, category: str, severity: str, message: str, xid: int | None, ts: datetime) -> LogLine:
        rank, local = key
        return LogLine(job_id=self.job_id, host=self.host, rank=rank, local_rank=local, stream=self.stream, ts=ts,
                       category=category, severity=severity, message=message[:8192], xid=xid)  # type: ignore[arg-type]

    def _limit(self, event: LogLine) -> list[LogLine]:
        emitted = self.limiter.offer((event.category, event.rank, event.local_rank), event, self.clock())
        return [self._repeat(e, n) if n > 1 else e for e, n in emitted]

    @staticmethod
    def _repeat(event: LogLine, repeats: int) -> LogLine:
        return event.model_copy(update={"repeats": repeats, "event_id": new_event_id(), "ts": utcnow()})
