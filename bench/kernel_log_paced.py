"""What following the kernel log adds to the agent at 1,000 lines/s of noise (issue 49's goal: under 1 % of a core).

The agent follows the kernel log on a thread of its own (`collector.kernellog.KernelLog.run`, built as
`collector.agent.Agent` builds it): that thread is all the kernel log adds to the agent. This bench runs that thread
in a child process over a fake `/dev/kmsg` file and measures the child's CPU time (user + system, all its threads)
in two phases: idle (nothing written: the thread's waits between reads) and paced (a writer in this process appends
`--rate` records a second of everyday kernel noise, one Xid per 1,000, for `--seconds`). The figure is the paced
phase's CPU per second minus the idle phase's, as a percentage of one core, with the records the child read and the
facts it emitted. A file, not the character device: the device gives one record per read(2), a file a buffer of
them, so on a real `/dev/kmsg` the syscalls per record are more (the per-record parse and classification, the bulk
of the cost, are the same). Appends a section to bench/RESULTS.md.

    python bench/kernel_log_paced.py [--rate 1000] [--seconds 60] [--idle-seconds 20] [--no-append]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
from kernel_log_cost import NOISE, XID  # the same records as the backlog bench


def child(directory: Path) -> None:
    """The agent's kernel log thread, as the agent builds it (defaults: poll 0.5 s, flood limits), until SIGTERM."""
    from vigil.collector.gpumap import GpuMap
    from vigil.collector.kernellog import KernelLog
    from vigil.collector.offsets import OffsetStore
    from vigil.collector.settings import CollectorSettings
    from vigil.contract import Event

    s = CollectorSettings(host="h", job_id="bench")
    facts: list[Event] = []
    source = KernelLog(path=directory / "kmsg", job_id="bench", host="h", store=OffsetStore(path=directory / "o.json"),
                       emit=facts.extend, gpus=GpuMap(sysfs_root=directory), rank_of_pid=lambda pid: (None, None),
                       poll_s=s.poll_interval, flood_burst=s.flood_burst, flood_window_s=s.flood_window_s,
                       source="kmsg")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=source.run, args=(stop,), daemon=True)
    thread.start()
    stop.wait()
    thread.join(timeout=10)
    reader = source.reader
    (directory / "done.json").write_text(json.dumps({"read": reader.last_seq if reader else None,
                                                     "facts": source.facts}))


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--no-append", action="store_true", help="print the row only")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        child(args.child)
        return
    d = Path(tempfile.mkdtemp())
    (d / "kmsg").write_text("6,0,1,-;Linux version 6.8.0\n")
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(d)], env={**os.environ})
    watched = psutil.Process(proc.pid)
    time.sleep(3.0)  # imports and the first read: not part of either phase
    c0, t0 = cpu(watched), time.monotonic()
    time.sleep(args.idle_seconds)
    idle = (cpu(watched) - c0) / (time.monotonic() - t0)
    seq, batch = 0, max(1, args.rate // 100)
    c1, t1 = cpu(watched), time.monotonic()
    with open(d / "kmsg", "a") as fh:
        while (now := time.monotonic()) < t1 + args.seconds:
            due = int((now - t1) * args.rate)
            while seq < due:
                for _ in range(min(batch, due - seq)):
                    seq += 1
                    fh.write(f"6,{seq},{int(time.monotonic() * 1e6)},-;{XID if seq % 1000 == 0 else NOISE[seq % 5]}\n")
                fh.flush()
            time.sleep(0.01)
    time.sleep(1.5)  # the last records' read
    paced = (cpu(watched) - c1) / (time.monotonic() - t1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    done = json.loads((d / "done.json").read_text())
    added = (paced - idle) * 100
    load = os.getloadavg()
    row = (f"| {args.rate:,} | {args.seconds:.0f} | {seq:,} | {done['read']:,} | {done['facts']} | {idle * 100:.3f} % | "
           f"{paced * 100:.3f} % | **{added:.3f} %** |")
    print(row)
    if args.no_append:
        return
    with open(Path(__file__).with_name("RESULTS.md"), "a") as fh:
        fh.write(f"\n## Kernel log followed at a paced rate (bench/kernel_log_paced.py, issue 49) — "
                 f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n\n"
                 f"Machine: {os.cpu_count()} CPU, Python {platform.python_version()}, Linux {platform.release()}; "
                 f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}.\n\n"
                 "| records/s | seconds | written | read | Xid facts | idle CPU (of a core) | paced CPU | added |\n"
                 "|---|---|---|---|---|---|---|---|\n" + row + "\n\n"
                 "The agent's kernel log thread (as the agent builds it) in a child process following a fake "
                 "`/dev/kmsg` file; CPU of that process in both phases; added = paced - idle. Goal: under 1 % of "
                 "a core at 1,000 lines/s.\n")


if __name__ == "__main__":
    main()
