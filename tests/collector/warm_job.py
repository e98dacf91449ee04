"""tests/recovery/job_worker.py behind a probe line: was this rank's interpreter warm (torch already imported at
entry) and when was it started (the kernel's start time of the process)? For test_warm_restart.py."""

import os
import runpy
import sys
from pathlib import Path

warm = "torch" in sys.modules
with open("/proc/self/stat") as fh:
    ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
with open("/proc/stat") as fh:
    boot = float(next(line for line in fh if line.startswith("btime")).split()[1])
started = boot + ticks / os.sysconf("SC_CLK_TCK")
print(f"[warm-probe] rank={os.environ['RANK']} torch_at_entry={warm} started={started:.2f} pid={os.getpid()}",
      flush=True)
runpy.run_path(str(Path(__file__).resolve().parents[1] / "recovery" / "job_worker.py"), run_name="__main__")
