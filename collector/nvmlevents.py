"""NVML as a source of hardware facts (source=nvml): an event set for Xid and ECC events, and the counters.

Beside the polled `GpuState` of heartbeats: `NvmlEvents` registers every GPU for critical Xid, single- and
double-bit ECC events in one event set and waits on it on a thread of its own (`nvmlEventSetWait`, a timeout
of `wait_ms`: never on the heartbeat thread). An Xid event gets the catalog's severity and action; a
double-bit ECC event is `ecc`, critical, reset the GPU; a single-bit one a warning to watch. Every
`poll_s` it reads, each on its own (a counter the GPU does not support, NOT_SUPPORTED, hides no other), each
GPU's remapped rows (pending: reset the GPU; failed: cordon), retired pages (growth: reset the GPU; growth in
`rising.condemn_after` polls within a day: critical, cordon, the GPU condemned) and their pending flag
(`nvmlDeviceGetRetiredPagesPendingStatus`: reset the GPU), and each active NVLink's error counters (CRC flit,
CRC data, replay, recovery: growth `nvlink`, warning, watch, at most once per `report_s` per link and counter;
CRC reports at `crc_per_s` (DCGM's 100/s) or more, `rising.condemn_after` times within a day, or a link seen
active staying inactive for `link_down_s` (not a reset's retraining): `nvlink`, error, cordon, the catalog's
NVLink class). It notices a GPU that is gone (fewer GPUs than at the start, or
NVML saying GPU_IS_LOST): `gpu_lost`, critical, reboot then check. Host faults are noted in the agent's error
memory, as kernel facts are.

The first poll is a baseline, unless the offsets store (`store`, key `nvml`) holds the last values of a GPU
with the same UUID: a restarted agent then sees the growth while it was down, and the growths `Rising` counted
(wall-clock times); a swapped GPU (a new UUID) starts fresh. The module is passed in (`pynvml`, or a test
double with the same functions).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vigil.collector.offsets import OffsetStore
from vigil.collector.rising import Rising
from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine, utcnow
from vigil.contract.telemetry import Severity
from vigil.contract.xid import HOST_ACTIONS, XidAction, xid_entry

log = logging.getLogger(__name__)
INVALID_ARGUMENT, NOT_SUPPORTED, TIMEOUT, GPU_IS_LOST = 2, 3, 10, 15  # NVML_ERROR_*
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED: a link active, a page retirement pending
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (where the module does not say)
NVLINK_COUNTERS = (  # our name, (pynvml's constant, its value where the module lacks it)
    ("crc_flit", ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2)), ("crc_data", ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3)),
    ("replay", ("NVML_NVLINK_ERROR_DL_REPLAY", 0)), ("recovery", ("NVML_NVLINK_ERROR_DL_RECOVERY", 1)))
NVLINK_LABELS = {"crc_flit": "CRC flit errors", "crc_data": "CRC data errors", "replay": "replays",
                 "recovery": "recoveries"}
STORE_KEY = "nvml"
MAX_SAVED = 64  # GPUs whose counters the offsets store keeps
NOTED = ("xid", "ecc", "gpu_lost", "nvlink")  # host faults the error memory notes (Member.fault)
SBE, DBE, XID = 0x1, 0x2, 0x8  # nvmlEventType{SingleBitEccError,DoubleBitEccError,XidCriticalError}


class _Lost(Exception):
    """NVML said GPU_IS_LOST while a counter was read."""


def _code(exc: Exception) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


@dataclass(kw_only=True)
class NvmlEvents:
    nvml: Any
    job_id: str
    host: str
    emit: Callable[[Sequence[Event]], None]
    memory: ErrorMemory | None = None
    wait_ms: int = 1000
    poll_s: float = 10.0
    report_s: float = 60.0  # NVLink counter growth: reported at most this often per link and counter
    crc_per_s: float = 100.0  # NVLink CRC errors per second in a report that count toward condemning (DCGM's rate)
    link_down_s: float = 30.0  # a link seen active stays inactive this long (not a reset's retraining): cordon
    store: OffsetStore | None = None  # the last counter values by GPU UUID, kept across agent restarts
    clock: Callable[[], float] = time.time  # wall clock: growth times are saved with the counters
    _set: Any = field(default=None, init=False)
    _index: dict[Any, int] = field(default_factory=dict, init=False)  # handle -> GPU index
    _uuid: dict[int, str] = field(default_factory=dict, init=False)
    _counters: dict[int, dict[str, int]] = field(default_factory=dict, init=False)  # GPU index -> counter values
    _links: dict[tuple[int, int], dict[str, int]] = field(default_factory=dict, init=False)  # (GPU, link) -> values
    _link_pending: dict[tuple[tuple[int, int], str], int] = field(default_factory=dict, init=False)
    _link_reported: dict[tuple[tuple[int, int], str], float] = field(default_factory=dict, init=False)
    _link_up: set[tuple[int, int]] = field(default_factory=set, init=False)
    _link_down_since: dict[tuple[int, int], float] = field(default_factory=dict, init=False)
    _link_since: dict[tuple[tuple[int, int], str], float] = field(default_factory=dict, init=False)  # rate's start
    _saved: dict[str, Any] | None = field(default=None, init=False)  # what the store holds (a rewrite only on change)
    _no_link: set[tuple[int, int]] = field(default_factory=set, init=False)
    _lost: set[int] = field(default_factory=set, init=False)
    rising: Rising = field(default_factory=Rising)  # retired pages / remapped rows that keep growing condemn the GPU

    def open(self) -> None:
        nv = self.nvml
        self._set = nv.nvmlEventSetCreate()
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self._index[h] = i
            uuid = nv.nvmlDeviceGetUUID(h)
            self._uuid[i] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            try:
                wanted = (SBE | DBE | XID) & int(nv.nvmlDeviceGetSupportedEventTypes(h))
                nv.nvmlDeviceRegisterEvents(h, wanted, self._set)
            except Exception as exc:  # not supported on this GPU: its counters are still read
                log.info("GPU %d: no NVML events (%s)", i, exc)
        self._restore()
        self.emit(self.poll())  # growth while the agent was down (against the saved values), else the baseline

    def run(self, stop: threading.Event) -> None:
        try:
            self.open()
        except Exception as exc:
            log.warning("NVML events not available (%s): none are waited for", exc)
            return
        next_poll = time.monotonic() + self.poll_s
        while not stop.is_set():
            try:
                self.emit(self.wait_once())
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.poll_s
                    self.emit(self.poll())
            except Exception:  # one failed wait or read never ends the source
                log.exception("NVML events")
                stop.wait(self.wait_ms / 1000)
        try:
            self.nvml.nvmlEventSetFree(self._set)
        except Exception:
            pass

    def wait_once(self) -> list[LogLine]:
        try:
            data = self.nvml.nvmlEventSetWait(self._set, self.wait_ms)
        except Exception as exc:
            if _code(exc) == TIMEOUT:
                return []
            if _code(exc) == GPU_IS_LOST:
                return self.poll()
            raise
        index = self._index.get(data.device)
        kind, value = int(data.eventType), int(data.eventData)
        if kind == XID:
            e = xid_entry(value)
            return [self._fact(index, "xid", e.severity, e.action, f"NVML: Xid {value} ({e.name})", xid=value)]
        if kind == DBE:
            return [self._fact(index, "ecc", "critical", XidAction.RESET_GPU, "NVML: double-bit ECC error")]
        if kind == SBE:
            return [self._fact(index, "ecc", "warning", XidAction.WATCH, "NVML: single-bit ECC error")]
        return []

    def poll(self) -> list[LogLine]:
        """Remapped rows, retired pages, NVLink error counters and GPUs gone since the last poll."""
        nv, out = self.nvml, []
        changed = False
        for h, i in self._index.items():
            if i in self._lost:
                continue
            try:
                facts, moved, lost = self._poll_gpu(h, i)
            except _Lost:  # lost while its counters were read: nothing of this poll was judged yet
                facts, moved, lost = [], False, True
            out += facts  # what was judged before the GPU was lost (a condemnation is never dropped)
            changed = changed or moved
            if lost:
                self._lost.add(i)
                out.append(self._fact(i, "gpu_lost", "critical", XidAction.REBOOT_THEN_CHECK, "NVML: the GPU is lost"))
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception:
            count = len(self._index)
        for i in range(count, len(self._index)):
            if i not in self._lost:
                self._lost.add(i)
                out.append(self._fact(i, "gpu_lost", "critical", XidAction.REBOOT_THEN_CHECK,
                                      "NVML: the GPU is gone from the device list"))
        if changed:
            self._save()
        return out

    def _read(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """One NVML reading, None where it fails (NOT_SUPPORTED: remapped rows before Ampere, retired pages on
        A100/H100); a lost GPU raises `_Lost`."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if _code(exc) == GPU_IS_LOST:
                raise _Lost from exc
            return None

    def _poll_gpu(self, h: Any, i: int) -> tuple[list[LogLine], bool, bool]:
        """One GPU's facts, whether its counters changed and whether it was lost while its links were read. Each
        counter is read on its own; every read of the counters comes before anything is judged (a GPU lost there
        raises `_Lost` with nothing counted)."""
        nv, now, out = self.nvml, self.clock(), []
        seen: dict[str, int] = {}
        rows = self._read(nv.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            _, unc, pending, failed = rows
            seen.update(rows=int(unc), remap_pending=int(bool(pending)), remap_failed=int(bool(failed)))
        pages = [self._read(nv.nvmlDeviceGetRetiredPages, h, c) for c in (
            getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
            getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))]
        if any(p is not None for p in pages):
            seen["pages"] = sum(len(p) for p in pages if p is not None)
        retire = self._read(getattr(nv, "nvmlDeviceGetRetiredPagesPendingStatus", None), h)
        if retire is not None:
            seen["retire_pending"] = int(int(retire) == FEATURE_ENABLED)
        before = self._counters.get(i)
        self._counters[i] = {**(before or {}), **seen}  # a read that failed this time keeps its last value
        changed = before != self._counters[i]
        if before is not None:
            prev: dict[str, int] = before

            def grew(name: str) -> int:
                b, n = prev.get(name), seen.get(name)
                return n - b if b is not None and n is not None and n > b else 0

            if grew("remap_failed"):
                out.append(self._fact(i, "ecc", "critical", XidAction.CORDON, "NVML: row remapping failed"))
            elif grew("remap_pending"):
                out.append(self._fact(i, "ecc", "warning", XidAction.RESET_GPU,
                                      f"NVML: row remapping pending ({seen['rows']} uncorrectable rows): reset the GPU"))
            if grew("retire_pending"):
                out.append(self._fact(i, "ecc", "warning", XidAction.RESET_GPU,
                                      "NVML: page retirement pending: reset the GPU to retire the pages"))
            if grew("pages"):
                out.append(self._fact(i, "ecc", "warning", XidAction.RESET_GPU,
                                      f"NVML: {grew('pages')} more retired pages ({seen['pages']} in all)"))
            if (grew("pages") or grew("rows")) and self.rising.grew(self._gpu_key(i), now):
                out.append(self._fact(i, "ecc", "critical", XidAction.CORDON,
                                      f"NVML: retired pages / remapped rows keep growing ({seen.get('pages', '?')} "
                                      f"pages, {seen.get('rows', '?')} uncorrectable rows; "
                                      f"{self.rising.condemn_after} growths within a day): condemned"))
        facts, moved, lost = self._poll_links(h, i, now)
        return out + facts, changed or moved, lost

    def _poll_links(self, h: Any, i: int, now: float) -> tuple[list[LogLine], bool, bool]:
        """Each active NVLink's error counters: growth reported at most once per `report_s` per link and counter
        (warning, watch); CRC reports at `crc_per_s` or more rising `rising.condemn_after` times within a day (CRC
        errors are corrected by replay: a trickle is watched, never condemned), or a link seen active staying
        inactive for `link_down_s` (not a reset's retraining): error, cordon (the catalog's NVLink class, Xid 74).
        The third value: the GPU was lost during the reads (what was judged before is kept)."""
        nv, changed = self.nvml, False
        out: list[LogLine] = []
        try:
            for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_LINKS))):
                key = (i, link)
                if key in self._no_link:
                    continue
                try:
                    state = nv.nvmlDeviceGetNvLinkState(h, link)
                except Exception as exc:
                    if _code(exc) == GPU_IS_LOST:
                        raise _Lost from exc
                    if _code(exc) in (NOT_SUPPORTED, INVALID_ARGUMENT):
                        self._no_link.add(key)  # no such link on this GPU: never asked again
                    continue
                if int(state) != FEATURE_ENABLED:
                    if key in self._link_up:
                        since = self._link_down_since.setdefault(key, now)
                        if now - since >= self.link_down_s:
                            self._link_up.discard(key)
                            self._link_down_since.pop(key, None)
                            out.append(self._fact(i, "nvlink", "error", XidAction.CORDON,
                                                  f"NVML: NVLink link {link} inactive for {now - since:.0f} s"))
                    continue  # a link never seen active here is unused
                self._link_up.add(key)
                self._link_down_since.pop(key, None)  # back (a GPU reset retrains its links)
                values = {name: int(v) for name, const in NVLINK_COUNTERS
                          if (v := self._read(nv.nvmlDeviceGetNvLinkErrorCounter, h, link,
                                              getattr(nv, const[0], const[1]))) is not None}
                before = self._links.get(key)
                self._links[key] = {**(before or {}), **values}
                changed = changed or before != self._links[key]
                for name in values:
                    self._link_since.setdefault((key, name), now)
                if before is None:
                    continue
                for name, value in values.items():
                    b = before.get(name)
                    if b is not None and value > b:  # a smaller value (a reset) is a new baseline
                        self._link_pending[(key, name)] = self._link_pending.get((key, name), 0) + value - b
                crc = False
                for name, label in NVLINK_LABELS.items():
                    grown = self._link_pending.get((key, name), 0)
                    last = self._link_reported.get((key, name))
                    if grown and (last is None or now - last >= self.report_s):
                        self._link_reported[(key, name)] = now
                        rate = grown / max(now - self._link_since.get((key, name), now), self.report_s)
                        self._link_since[(key, name)] = now
                        del self._link_pending[(key, name)]
                        changed = True  # the saved value now holds this growth
                        out.append(self._fact(i, "nvlink", "warning", XidAction.WATCH,
                                              f"NVML: NVLink link {link} {label} +{grown} (now {values[name]})"))
                        crc = crc or (name.startswith("crc") and rate >= self.crc_per_s)
                if crc and self.rising.grew(("nvlink", self._gpu_key(i), link), now):
                    out.append(self._fact(i, "nvlink", "error", XidAction.CORDON,
                                          f"NVML: NVLink link {link} CRC errors keep rising at {self.crc_per_s:.0f}/s or "
                                          f"more ({self.rising.condemn_after} reports within "
                                          f"{self.rising.window_s / 3600:.0f} h)"))
        except _Lost:
            return out, True, True  # what was judged before the GPU was lost ships
        return out, changed, False

    # ---- counters kept across agent restarts ---------------------------------------------------
    def _gpu_key(self, i: int) -> str:
        return self._uuid.get(i) or f"index-{i}"

    def _restore(self) -> None:
        """Baselines from the offsets store: a GPU whose UUID was saved compares its first poll with the saved values
        (growth while the agent was down is growth); a new UUID (a swapped GPU) starts fresh."""
        saved = self.store.get(STORE_KEY) if self.store is not None else None
        if not isinstance(saved, dict):
            return
        for i, uuid in self._uuid.items():
            doc = saved.get(uuid) if uuid else None
            if not isinstance(doc, dict):
                continue
            try:
                self._restore_gpu(i, doc)
            except (TypeError, ValueError, OverflowError) as exc:  # a damaged state file: that GPU starts fresh
                log.warning("GPU %d: saved NVML counters not usable (%s): a fresh baseline", i, exc)
                self._counters.pop(i, None)

    def _restore_gpu(self, i: int, doc: dict[str, Any]) -> None:
        """One GPU's saved counters, NVLink values and growth times (only well-formed entries)."""
        counters = doc.get("counters")
        if isinstance(counters, dict):
            self._counters[i] = {k: v for k, v in counters.items() if isinstance(v, int)}
        links = doc.get("links")
        if isinstance(links, dict):
            for link, values in links.items():
                if re.fullmatch(r"[0-9]{1,2}", str(link)) and isinstance(values, dict):
                    self._links[(i, int(link))] = {k: v for k, v in values.items() if isinstance(v, int)}
        grew = doc.get("grew")
        if isinstance(grew, dict):
            for what, times in grew.items():
                held = [float(t) for t in times if isinstance(t, (int, float))] if isinstance(times, list) else []
                if what == "gpu":
                    self.rising.restore(self._gpu_key(i), held)
                elif re.fullmatch(r"[0-9]{1,2}", str(what)):
                    self.rising.restore(("nvlink", self._gpu_key(i), int(what)), held)

    def _save(self) -> None:
        """Each present GPU's counters by UUID (bounded: at most `MAX_SAVED` GPUs and `MAX_LINKS` links each); a
        growth not yet reported is left out of the saved value, so a restart reports it."""
        if self.store is None:
            return
        doc: dict[str, Any] = {}
        for i, uuid in sorted(self._uuid.items())[:MAX_SAVED]:
            if not uuid:
                continue  # no UUID: nothing to key its values by across a restart
            links: dict[str, dict[str, int]] = {}
            grew: dict[str, list[float]] = {"gpu": self.rising.history(self._gpu_key(i))}
            for (gpu, link), values in sorted(self._links.items()):
                if gpu == i and link < MAX_LINKS:
                    links[str(link)] = {k: v - self._link_pending.get(((gpu, link), k), 0) for k, v in values.items()}
                    if times := self.rising.history(("nvlink", self._gpu_key(i), link)):
                        grew[str(link)] = times
            doc[uuid] = {"counters": self._counters.get(i, {}), "links": links, "grew": grew}
        if doc != self._saved:
            self.store.save(**{STORE_KEY: doc})
            self._saved = doc

    def _fact(self, index: int | None, category: str, severity: Severity, action: XidAction, message: str,
              xid: int | None = None) -> LogLine:
        if self.memory is not None and action in HOST_ACTIONS and category in NOTED:
            self.memory.note_fault(category, message, utcnow(), gpu=index, action=action.value)
        return LogLine(job_id=self.job_id, host=self.host, category=category, severity=severity, source="nvml",
                       action=action, xid=xid, gpu_index=index, message=message,
                       gpu_uuid=self._uuid.get(index, "") if index is not None else "")
