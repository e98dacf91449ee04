"""The agent's durable positions: one JSON file, rewritten atomically after each commit.

Holds, per source name, whatever that source needs to resume (the outbox cursor, the
timer files' committed offsets, processed Flight Recorder dumps). Written with
write-to-temp + rename, so a kill leaves the old or the new file, never half of one.
A write that fails is counted and logged; the next one tries again (at worst a
restart re-sends events, which downstream dedups by event_id).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class OffsetStore:
    path: Path
    errors: int = 0
    _doc: dict[str, Any] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def load(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            doc = {}
        except (OSError, ValueError) as exc:
            log.warning("offsets %s unreadable (%s); starting from the beginning of every file", self.path, exc)
            doc = {}
        with self._lock:
            self._doc = doc if isinstance(doc, dict) else {}
            return dict(self._doc)

    def get(self, name: str, default: Any = None) -> Any:
        with self._lock:
            return self._doc.get(name, default)

    def save(self, **parts: Any) -> None:
        """Replace the named parts and write the whole file."""
        with self._lock:
            self._doc.update(parts)
            body = json.dumps(self._doc, separators=(",", ":"))
            tmp = self.path.with_name(f".{self.path.name}.{threading.get_ident()}.tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(body)
                os.replace(tmp, self.path)
            except OSError as exc:
                self.errors += 1
                if self.errors == 1 or self.errors % 100 == 0:
                    log.warning("offsets %s: cannot write (%s); %d failures", self.path, exc, self.errors)
                try:
                    tmp.unlink(missing_ok=True)
                except OSError:
                    pass
