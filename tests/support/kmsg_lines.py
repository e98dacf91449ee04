"""Kernel log lines as the kernel and the drivers write them, and a fake `/dev/kmsg` file to append them to."""

from __future__ import annotations

import time
from pathlib import Path

XID = {
    13: "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x405840=0x3",
    31: "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=python, Ch 00000008, intr 10000000. MMU Fault: ENGINE "
        "GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f23_4a600000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    48: "NVRM: Xid (PCI:0000:86:00): 48, pid=4243, name=python, An uncorrectable double bit error (DBE) has been "
        "detected on GPU in the framebuffer at partition 6, subpartition 0.",
    79: "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    94: "NVRM: Xid (PCI:0000:3b:00): 94, pid=4242, name=python, Contained: SM (0x1). RST: No, D-RST: No",
}
SXID = "nvidia-nvswitch2: SXid (PCI:0000:c5:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error (First)"
AER = "pcieport 0000:85:01.0: AER: Uncorrected (Fatal) error received: 0000:86:00.0"
AER_CORRECTED = "pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0"
LINK_DOWN = "mlx5_core 0000:5e:00.0 ibp94s0: Link down"
OOM = "Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:81234567kB, file-rss:0kB, " \
      "shmem-rss:0kB, UID:0 pgtables:160000kB oom_score_adj:0"
OOM_KILL = "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom," \
           "task_memcg=/kubepods/pod1,task=python,pid=4242,uid=0"
EDAC_UE = "EDAC MC1: 1 UE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x1234 " \
          "offset:0x0 grain:32 syndrome:0x0)"
EDAC_CE = "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x55 offset:0x0)"
MCE = "mce: [Hardware Error]: Machine check events logged"
NOISE = "audit: type=1400 audit(1700000000.123:42): apparmor=\"DENIED\" operation=\"open\" profile=\"snap\""


class FakeKmsg:
    """A file in `/dev/kmsg`'s record format: `pri,seq,usec,flags;message` + ` KEY=VALUE` lines."""

    def __init__(self, path: Path, seq: int = 0) -> None:
        self.path, self.seq = path, seq
        path.touch()

    def write(self, *messages: str, pri: int = 3, fields: dict[str, str] | None = None, skip: int = 0) -> list[int]:
        """Append one record per message (`skip` sequence numbers first: records the ring lost); their seqs."""
        self.seq += skip
        seqs, body = [], ""
        for m in messages:
            self.seq += 1
            seqs.append(self.seq)
            body += f"{pri},{self.seq},{int(time.monotonic() * 1e6)},-;{m}\n"
            body += "".join(f" {k}={v}\n" for k, v in (fields or {}).items())
        with open(self.path, "a") as fh:
            fh.write(body)
        return seqs
