"""The recovery controller's commands for this agent, and the acknowledgements it sends back.

`CommandFeed.poll()` follows the `commands` topic (every partition, from the beginning, no
consumer group) and returns the commands addressed to this job and host, each
`command_id` once: ids already executed are remembered in `<state_dir>/commands.json`, so an
agent restarted with the same state directory never runs a command twice, and commands
issued before this agent started (less a clock-skew allowance) are ignored. `ack()` builds
the `recovery` event that acknowledges a command (same action, same `command_id`).

Only commands signed by the controller's key, of a lease epoch no older than the newest this
agent obeyed, are returned (`vigil.signing.gate`); the others are counted, logged and raised
once as a `security` alert (`emit`), and their `command_id` is not remembered, so a forged
command that took a genuine one's id first does not shadow it. A signed command also has a
lifetime (`vigil.signing.freshness`: its signed `valid_s`, at least `max(timeout_s, 10 min)`) against the
log's clock, the newest command this agent read for its host (one partition: log order): one past it is a
replay, refused the same way (problem `expired`), whether or not its id is still remembered. Commands dated
before this agent started (less `SKEW`) are history, neither executed nor refused.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from vigil.contract import Command, Event, RecoveryAction
from vigil.signing.gate import Gate

log = logging.getLogger(__name__)
SKEW = timedelta(seconds=30)
REMEMBERED = 2000

AckStatus = Literal["started", "succeeded", "failed", "skipped"]


@dataclass(kw_only=True)
class CommandFeed:
    poll_events: Callable[[float], list[Event]]  # a Follower's poll over the commands topic
    job_id: str
    host: str
    since: datetime  # this agent's start
    done_file: Path
    gate: Gate
    emit: Callable[[list[Event]], None]  # where security alerts go (the agent's sink)
    _done: deque[str] = field(default_factory=deque, init=False)
    _seen: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        try:
            ids = json.loads(self.done_file.read_text())
            for cid in ids[-REMEMBERED:] if isinstance(ids, list) else []:
                self._remember(str(cid))
        except (OSError, ValueError):
            pass

    def poll(self, timeout: float = 0.5) -> list[Command]:
        out: list[Command] = []
        mine = [e for e in self.poll_events(timeout) if isinstance(e, Command) and e.job_id == self.job_id
                and e.host == self.host and e.ts >= self.since - SKEW]
        accepted, alerts = self.gate.admit(mine, datetime.now(self.since.tzinfo))
        if alerts:
            self.emit(list(alerts))
        for e in accepted:
            assert isinstance(e, Command)
            if e.command_id in self._seen:
                continue
            self._remember(e.command_id)
            out.append(e)
        if out:
            self._save()
        return out

    def _remember(self, command_id: str) -> None:
        self._done.append(command_id)
        self._seen.add(command_id)
        while len(self._done) > REMEMBERED:
            self._seen.discard(self._done.popleft())

    def _save(self) -> None:
        tmp = self.done_file.with_suffix(".tmp")
        try:
            self.done_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(list(self._done)))
            os.replace(tmp, self.done_file)
        except OSError as exc:
            log.warning("cannot remember executed commands in %s: %s", self.done_file, exc)


def ack(command: Command, status: AckStatus, *, reason: str = "", started: datetime | None = None,
        details: dict[str, Any] | None = None) -> RecoveryAction:
    """The acknowledgement of `command` by this agent."""
    duration = None
    now = datetime.now(command.ts.tzinfo)
    if started is not None:
        duration = round(max(0.0, (now - started).total_seconds() * 1000), 1)
    return RecoveryAction(
        job_id=command.job_id, host=command.host, action=command.action, target=command.host, status=status,
        reason=reason[:4096], incident_id=command.incident_id, command_id=command.command_id,
        actor=f"agent:{command.host}", generation=command.generation or None, started_at=started,
        duration_ms=duration, details=details or {},
    )
