"""The agent: sources -> outbox -> shipper -> sink, on two threads.

The collector thread runs the periodic work: heartbeats, NIC rates, Flight Recorder
scans, log-directory tailing and flood summaries of live streams; everything it makes
goes into the durable outbox. The shipper thread delivers the outbox and the step
timer's spool files, committing offsets after delivery. `emit()` is how the launcher's
output readers add events. `stop()` drains what it can within the drain timeout;
the rest stays on disk for the next agent with the same state directory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigil.collector.dcgm import DcgmHealth, DcgmWatch, load_dcgm
from vigil.collector.flightrec import FlightRecorderWatcher
from vigil.collector.gpu import NvmlProbe
from vigil.collector.gpumap import GpuMap
from vigil.collector.heartbeat import HeartbeatBuilder, Identity
from vigil.collector.ibhealth import IbHealth, read_ports
from vigil.collector.kernellog import KernelLog, read_boot_id
from vigil.collector.logstream import LogStream
from vigil.collector.nic import RateTracker, read_ethernet, read_rdma
from vigil.collector.nvmlevents import NvmlEvents
from vigil.collector.offsets import OffsetStore
from vigil.collector.outbox import Outbox
from vigil.collector.procs import ProcessTracker
from vigil.collector.rules import Rule, load_rules
from vigil.collector.settings import AgentPaths, CollectorSettings
from vigil.collector.shipper import LineDecoder, OutboxSource, Shipper, SpoolSource
from vigil.collector.sink import Sink
from vigil.collector.spoolguard import SpoolGuard
from vigil.collector.summary import ErrorMemory
from vigil.collector.tailer import Tailer
from vigil.collector.xiddedupe import XidDedupe
from vigil.contract import Event, NicCounters

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Agent:
    settings: CollectorSettings
    paths: AgentPaths
    sink: Sink
    spool_roots: list[Path]
    fr_dirs: list[tuple[Path, str]] = field(default_factory=list)
    log_dirs: list[Path] = field(default_factory=list)
    tracker: ProcessTracker = field(default_factory=ProcessTracker)
    gpus: NvmlProbe | None = None
    dcgm_health: DcgmHealth | None = None  # DCGM's health watches (None: `load_dcgm` where `settings.dcgm`)
    clock: Callable[[], float] = time.monotonic
    memory: ErrorMemory = field(default_factory=ErrorMemory)  # each rank's last error, for the exit report
    serves_one_job: bool = True  # False: a DaemonSet agent shipping the spool lines of every job on its host
    attest: Callable[[Event], Event] | None = None  # under recovery control: seals this host's facts as they are made

    def __post_init__(self) -> None:
        s = self.settings
        self.rules: list[Rule] = load_rules(s.rules, s.rules_file)
        self.store = OffsetStore(path=self.paths.offsets_file)
        state = self.store.load()
        self.outbox = Outbox(directory=self.paths.outbox_dir, max_bytes=int(s.outbox_max_mb * 2**20),
                             memory_limit=s.memory_buffer_events)
        cursor = state.get("outbox")
        self.outbox.restore(cursor if isinstance(cursor, list) and len(cursor) == 2 else None)
        self.decoder = LineDecoder()
        self.spool = SpoolSource(tailer=Tailer(roots=self.spool_roots, restored=list(state.get("spool") or [])),
                                 decoder=self.decoder, scan_interval_s=s.poll_interval,
                                 guard=SpoolGuard(host=s.host, job_id=s.job_id if self.serves_one_job else None),
                                 alerts=self.emit)
        self.shipper = Shipper(sources=[OutboxSource(outbox=self.outbox, decoder=self.decoder), self.spool],
                               sink=self.sink, store=self.store, max_events=s.batch_max_events,
                               idle_s=s.poll_interval)
        self.log_tailer = Tailer(roots=self.log_dirs, patterns=("*.log",), restored=list(state.get("logs") or []))
        fr_state = state.get("fr")
        self.fr = FlightRecorderWatcher(dirs=self.fr_dirs, job_id=s.job_id, host=s.host,
                                        max_entries=s.fr_max_entries,
                                        processed=dict(fr_state) if isinstance(fr_state, dict) else {})
        if self.gpus is None:
            self.gpus = NvmlProbe()
        self.identity = Identity.detect(job_id=s.job_id, host=s.host)
        self.heartbeats = HeartbeatBuilder(identity=self.identity, interval_s=s.heartbeat_interval,
                                           processes=self.tracker, gpus=self.gpus,
                                           counters=lambda: (self.outbox.dropped, self.outbox.backlog()))
        self.nic = RateTracker()
        module = self.gpus.module
        self.xids = XidDedupe(clock=self.clock)  # one Xid the kernel log and NVML both report ships once
        self.nvml_events = NvmlEvents(nvml=module, job_id=s.job_id, host=s.host, emit=self.xids.wrap(self.emit),
                                      memory=self.memory, store=self.store) if module is not None else None
        health = self.dcgm_health or (load_dcgm(s.dcgm_address) if s.dcgm else None)
        self.dcgm = DcgmWatch(health=health, job_id=s.job_id, host=s.host, emit=self.emit, interval_s=s.dcgm_interval_s,
                              memory=self.memory) if health is not None else None
        self.ib = IbHealth(job_id=s.job_id, host=s.host, polling_s=s.ib_polling_s, report_s=s.ib_report_s)
        self.ib.restore(state.get("ib"))  # the port counters a previous agent saw: growth since is growth
        self.kernel = KernelLog(
            path=s.kmsg_path, job_id=s.job_id, host=s.host, store=self.store, emit=self.xids.wrap(self.emit),
            gpus=GpuMap(sysfs_root=s.sysfs_root, procfs_root=s.procfs_root, probe=self.gpus), rank_of_pid=self.rank_of_pid,
            boot_id=read_boot_id(s.procfs_root), poll_s=s.poll_interval, flood_burst=s.flood_burst,
            flood_window_s=s.flood_window_s, clock=self.clock, memory=self.memory, source=s.kernel_log,
            journalctl=s.journalctl) if s.kmsg_path is not None else None
        self.streams: list[LogStream] = []
        self._file_streams: dict[str, LogStream] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.emitted = 0

    # ---- events in ---------------------------------------------------------------------------
    def emit(self, events: Sequence[Event]) -> None:
        if events:
            if self.attest is not None:  # sealed where made, before the outbox (which the job's uid may write)
                events = [self.attest(e) for e in events]
            self.outbox.append(events)
            self.emitted += len(events)

    def read_kernel_log_to_now(self) -> bool:
        """Before a failed command's exit is reported: wait (at most `kernel_settle_s`) for the kernel log thread to
        finish a read begun now, so the fault the driver logged before the rank saw its error is in the error
        memory. False when there is no kernel log being followed, or it did not catch up in time."""
        return self.kernel is not None and self.kernel.caught_up(self.settings.kernel_settle_s)

    def new_stream(self, **kw: Any) -> LogStream:
        """A LogStream with this agent's identity, rules, flood limits and error memory, ticked by the agent."""
        s = self.settings
        kw.setdefault("memory", self.memory)
        stream = LogStream(job_id=s.job_id, host=s.host, rules=self.rules, rank_of=self.tracker.rank_of,
                           flood_burst=s.flood_burst, flood_window_s=s.flood_window_s, clock=self.clock, **kw)
        self.streams.append(stream)
        return stream

    def rank_of_pid(self, pid: int) -> tuple[int | None, int | None]:
        """(rank, local rank) of `pid` when it is one of this host's rank processes."""
        for w in self.tracker.workers():
            if w.pid == pid:
                return w.rank, w.local_rank
        return None, None

    def add_log_dir(self, path: Path) -> None:
        """Also tail `*.log` files under `path` (torchrun's per-rank files when it redirects)."""
        if path not in self.log_dirs:
            self.log_dirs.append(path)  # the log tailer shares this list

    # ---- periodic work -----------------------------------------------------------------------
    def heartbeat(self) -> None:
        self.emit([self.heartbeats.build()])

    def sample_nics(self) -> None:
        s = self.settings
        samples = read_rdma(s.sysfs_root) + read_ethernet(s.procfs_root, s.nic_exclude)
        self.emit([
            NicCounters(job_id=s.job_id, host=s.host, device=r.sample.device, port=r.sample.port, link=r.sample.link,
                        tx_bytes=r.sample.tx_bytes, rx_bytes=r.sample.rx_bytes, tx_bps=r.tx_bps, rx_bps=r.rx_bps,
                        interval_s=round(r.interval_s, 6), extra=r.sample.extra)
            for r in self.nic.update(samples, self.clock())
        ])
        self.emit(self.ib.update(read_ports(s.sysfs_root), self.clock()))  # port state and error counters
        if self.ib.dirty:
            self.store.save(ib=self.ib.snapshot())

    def scan_files(self) -> None:
        traces = self.fr.scan()
        if traces:
            self.emit(traces)
            self.store.save(fr=self.fr.processed)
        if self.log_dirs:
            self._tail_logs()
        for stream in list(self.streams):
            self.emit(stream.tick())

    def _tail_logs(self) -> None:
        self.log_tailer.scan()
        chunks = self.log_tailer.read_lines(5000)
        for chunk in chunks:
            stream = self._file_streams.get(chunk.file.key)
            if stream is None:
                parent = chunk.file.path.parent.name
                stream = self.new_stream(stream="stderr" if "err" in chunk.file.path.name else "stdout",
                                         local_rank=int(parent) if parent.isdigit() else None)
                self._file_streams[chunk.file.key] = stream
            for line in chunk.lines:
                self.emit(stream.feed(line))
            self.log_tailer.commit({chunk.file.key: chunk.end})
        for key in [k for k in self._file_streams if k not in self.log_tailer.files]:
            stream = self._file_streams.pop(key)
            self.emit(stream.close())
            self.streams.remove(stream)
        if chunks:
            self.store.save(logs=self.log_tailer.state())

    def _collect(self) -> None:
        s = self.settings
        tasks: list[tuple[float, Callable[[], None]]] = [
            (s.heartbeat_interval, self.heartbeat), (s.nic_interval, self.sample_nics),
            (s.poll_interval, self.scan_files),
        ]
        due = [self.clock()] * len(tasks)
        while not self._stop.is_set():
            now = self.clock()
            for i, (every, task) in enumerate(tasks):
                if now >= due[i]:
                    due[i] = max(due[i] + every, now)
                    try:
                        task()
                    except Exception:  # a broken reading must not stop the agent
                        log.exception("agent task %s failed", getattr(task, "__name__", task))
            self._stop.wait(max(0.0, min(due) - self.clock()))

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._collect, name="vigil-agent-collect", daemon=True),
            threading.Thread(target=self.shipper.run, args=(self._stop,), name="vigil-agent-ship", daemon=True),
        ]
        if self.kernel is not None:  # its own thread: a read of the kernel log never delays a heartbeat
            self._threads.append(threading.Thread(target=self.kernel.run, args=(self._stop,),
                                                  name="vigil-agent-kmsg", daemon=True))
        if self.nvml_events is not None:  # waits on NVML's event set: a thread of its own
            self._threads.append(threading.Thread(target=self.nvml_events.run, args=(self._stop,),
                                                  name="vigil-agent-nvml", daemon=True))
        if self.dcgm is not None:  # DCGM's health check may take its time: a thread of its own
            self._threads.append(threading.Thread(target=self.dcgm.run, args=(self._stop,),
                                                  name="vigil-agent-dcgm", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self, drain_timeout_s: float | None = None) -> bool:
        """Stop both threads, emit a last heartbeat, deliver what is pending; True when all went."""
        self._stop.set()
        if self.kernel is not None:
            self.kernel.interrupt()  # out of its wait between reads of a file
        for t in self._threads:
            t.join(timeout=30)
        try:
            for stream in self.streams:
                self.emit(stream.close())
            self.heartbeat()
        except Exception:
            log.exception("final heartbeat failed")
        timeout = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        self.spool.rescan()  # the spool's files are scanned every 0.5 s: lines written since would stay unread
        done = self.shipper.drain(timeout)
        if refused := sum(self.spool.guard.refused.values()):
            log.warning("refused %d spool lines from the training side: %s", refused, self.spool.guard.counts())
        if not done:
            log.warning("%d events not delivered yet; they stay in %s for the next agent",
                        self.outbox.backlog(), self.paths.outbox_dir)
        self.sink.close()
        self.outbox.close()
        if self.gpus is not None:
            self.gpus.close()
        return done

    def stats(self) -> dict[str, Any]:
        return {
            "emitted": self.emitted, "xid_duplicates": self.xids.duplicates, "delivered": self.shipper.delivered,
            "delivery_failures": self.shipper.failures,
            "healthy": self.shipper.healthy, "backlog": self.outbox.backlog(), **self.outbox.stats(),
            "malformed_lines": self.decoder.malformed, "malformed_dumps": self.fr.malformed,
            "spool_lost_bytes": self.spool.tailer.lost_bytes, "spool_refused": self.spool.guard.counts(),
            "spool_oversized_lines": self.spool.tailer.oversized_lines + self.log_tailer.oversized_lines,
            "log_lines_cut": sum(s.truncated for s in list(self.streams)),
            **(self.kernel.stats() if self.kernel is not None else {}),
        }
