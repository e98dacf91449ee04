"""PyTorch Flight Recorder dumps -> CollectiveTrace events.

Dumps are files written by `torch._C._distributed_c10d._dump_fr_trace_json()` (JSON)
or `_dump_fr_trace()` / the NCCL dump-on-timeout (pickle), named `<prefix><rank>` like
torch's `TORCH_FR_DUMP_TEMP_FILE` files. A watched directory's file is read once its
size and mtime held still for one scan. Pickles are read with an unpickler that
refuses every class (dumps hold only dicts, lists, strings and numbers), so a hostile
file cannot run code. Gloo quirks are tolerated: state always "scheduled", pg_config
keyed by "", no send/recv. The newest `max_entries` entries are kept, frames cut to 3.
Dumps written by the step timer's hang watchdog carry a `vigil` object beside torch's
keys (the rank's process groups with their global ranks, its last step, what triggered
the dump, where its training thread was); it becomes the trace's `group_ranks`,
`step`, `trigger` and `stack`.

Bounded whatever the dump says (a pickle's memo makes a 233-byte file a graph of billions of paths):
only the entry fields torch writes and the analyzer reads are kept (`ENTRY_FIELDS`, the rest
dropped), each value cut to `MAX_ITEMS` items per list, `MAX_DEPTH` levels and `MAX_TEXT` characters,
at most `MAX_GROUPS` process groups and `MAX_RANKS` ranks over all groups, and the entries, newest
first, to `MAX_TRACE_BYTES` of JSON in all.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vigil.contract import CollectiveEntry, CollectiveTrace

log = logging.getLogger(__name__)
MAX_DUMP_BYTES = 256 << 20
MAX_TRACE_BYTES = 1 << 20
MAX_ITEMS, MAX_DEPTH, MAX_TEXT, MAX_GROUPS, MAX_RANKS = 16, 3, 256, 256, 1 << 17
ENTRY_FIELDS = frozenset({
    "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "state",
    "retired", "is_p2p", "timeout_ms", "time_created_ns", "time_discovered_started_ns",
    "time_discovered_completed_ns", "duration_ms", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
    "frames", "thread_id", "thread_name"})
_RANK = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"flight recorder dump references {module}.{name}: refused")


def parse_dump(data: bytes) -> dict[str, Any]:
    """A dump's document; ValueError when it is neither JSON nor a plain pickle of a dict."""
    doc: Any
    if data.lstrip()[:1] == b"{":
        try:
            doc = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
    else:
        try:
            doc = _NoClasses(io.BytesIO(data)).load()
        except Exception as exc:
            raise ValueError(f"not a flight recorder pickle: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise ValueError("flight recorder dump must be a dict with an 'entries' list")
    return doc


def rank_from_name(name: str) -> int | None:
    m = _RANK.search(name)
    return int(m[1]) if m else None


def _seq(value: Any) -> int | None:
    if not isinstance(value, (int, str)) or (isinstance(value, str) and len(value) > 32):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def bounded(value: Any, depth: int = 0) -> Any:
    """`value` cut to plain JSON of at most `MAX_DEPTH` levels, `MAX_ITEMS` items a level, `MAX_TEXT` characters."""
    if value is None or isinstance(value, (bool, int, float)):
        return value if not isinstance(value, int) or abs(value) < 1 << 63 else None
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, (list, tuple)):
        return [bounded(v, depth + 1) for v in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(k)[:MAX_TEXT]: bounded(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    return None


def _entry(raw: dict[str, Any]) -> dict[str, Any]:
    item = {k: bounded(raw[k]) for k in ENTRY_FIELDS if k in raw}
    if isinstance(item.get("frames"), list):
        item["frames"] = item["frames"][:3]
    return item


def to_trace(doc: dict[str, Any], *, job_id: str, host: str, rank: int, max_entries: int = 500,
             dumped_at: datetime | None = None) -> CollectiveTrace:
    entries: list[CollectiveEntry] = []
    groups: dict[str, str] = {}
    budget = MAX_TRACE_BYTES
    raws = doc.get("entries", [])[-max_entries:]
    for raw in reversed(raws):  # the newest first: they are what a hang is about
        if not isinstance(raw, dict):
            continue
        item = _entry(raw)
        budget -= len(json.dumps(item, default=str))
        if budget < 0:
            break
        pg = item.get("process_group")
        if isinstance(pg, list) and len(pg) == 2 and len(groups) < MAX_GROUPS:
            groups[str(pg[0])] = str(pg[1])
        try:
            entries.append(CollectiveEntry.model_validate(item))
        except ValidationError as exc:
            log.debug("flight recorder entry skipped: %s", exc)
    entries.reverse()
    started: dict[str, int] = {}
    completed: dict[str, int] = {}
    status = doc.get("pg_status")
    for pg_id, st in (list(status.items())[:MAX_GROUPS] if isinstance(status, dict) else []):
        if isinstance(st, dict):
            if (s := _seq(st.get("last_started_collective"))) is not None:
                started[str(pg_id)] = s
            if (c := _seq(st.get("last_completed_collective"))) is not None:
                completed[str(pg_id)] = c
    raw_extra = doc.get("vigil")
    extra: dict[str, Any] = raw_extra if isinstance(raw_extra, dict) else {}
    group_ranks: dict[str, list[int]] = {}
    named = extra.get("group_ranks")
    left = MAX_RANKS
    for name, ranks in (list(named.items())[:MAX_GROUPS] if isinstance(named, dict) else []):
        if isinstance(ranks, list) and len(ranks) <= left and all(isinstance(r, int) and r >= 0 for r in ranks):
            group_ranks[str(name)[:MAX_TEXT]] = sorted(ranks)
            left -= len(ranks)
    step = _seq(extra.get("step"))
    return CollectiveTrace(job_id=job_id, host=host, rank=rank, process_groups=groups, entries=entries,
                           last_started_seq=started, last_completed_seq=completed, dumped_at=dumped_at,
                           group_ranks=group_ranks, trigger=_text(extra.get("trigger"))[:64],
                           step=step if step is not None and step >= 0 else None,
                           stack=_text(extra.get("stack"))[-8192:])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""  # never str() of what may be a graph of billions of paths


@dataclass(kw_only=True)
class FlightRecorderWatcher:
    """Watches directories (each with a file-name prefix) for finished dumps."""

    dirs: list[tuple[Path, str]]
    job_id: str
    host: str
    max_entries: int = 500
    processed: dict[str, list[float]] = field(default_factory=dict)  # path -> [size, mtime] shipped
    malformed: int = 0
    _pending: dict[str, tuple[int, float]] = field(default_factory=dict, init=False)

    def scan(self) -> list[CollectiveTrace]:
        out: list[CollectiveTrace] = []
        for key in [k for k in self.processed if not Path(k).exists()]:
            del self.processed[key]  # the dump was removed: forget it
        for directory, prefix in self.dirs:
            try:
                paths = [p for p in directory.iterdir() if p.name.startswith(prefix) and not p.name.startswith(".")
                         and not p.name.endswith((".tmp", ".partial"))]
            except OSError:
                continue
            for path in paths:
                try:
                    st = path.stat()
                except OSError:
                    continue
                if not path.is_file() or st.st_size == 0:
                    continue
                key, sig = str(path), (st.st_size, st.st_mtime)
                if self.processed.get(key) == [float(sig[0]), sig[1]]:
                    continue
                if self._pending.get(key) != sig:
                    self._pending[key] = sig  # wait one scan for the writer to finish
                    continue
                del self._pending[key]
                self.processed[key] = [float(sig[0]), sig[1]]
                trace = self._read(path, prefix, st.st_size, st.st_mtime)
                if trace is not None:
                    out.append(trace)
        return out

    def _read(self, path: Path, prefix: str, size: int, mtime: float) -> CollectiveTrace | None:
        try:
            if size > MAX_DUMP_BYTES:
                raise ValueError(f"{size} bytes is over the {MAX_DUMP_BYTES} byte limit")
            doc = parse_dump(path.read_bytes())
            rank = _seq(doc.get("rank"))
            if rank is None:
                rank = rank_from_name(path.name[len(prefix):] or path.name)
            if rank is None or rank < 0:
                raise ValueError("no rank in the dump or its file name (expected <prefix><rank>)")
            return to_trace(doc, job_id=self.job_id, host=self.host, rank=rank, max_entries=self.max_entries,
                            dumped_at=datetime.fromtimestamp(mtime, UTC))
        except (OSError, ValueError) as exc:
            self.malformed += 1
            log.warning("flight recorder dump %s skipped: %s", path, exc)
            return None
