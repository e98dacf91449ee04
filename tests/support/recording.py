"""A recording next step: what a step under test hands on, and each request for room, in order (no broker)."""

from __future__ import annotations

from typing import Any

from vigil.kafka.batch import Batch


class Recorder:
    """A next step that records what it is handed (and, for a batch step, each request for room)."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.calls: list[str] = []

    def submit(self, message: Any) -> None:
        self.calls.append("submit")
        self.got.append(message)

    def make_room(self, upcoming: Batch) -> None:
        self.calls.append(f"room:{len(upcoming)}")

    def poll(self) -> None:
        self.calls.append("poll")

    def join(self) -> None:
        self.calls.append("join")

    def close(self) -> None:
        self.calls.append("close")
