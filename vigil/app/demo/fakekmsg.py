"""A stand-in for the NVIDIA driver where there is no GPU: an Xid record appended to a host's fake kernel log.

The record is in the kernel's `/dev/kmsg` format (`pri,seq,usec,flags;message`, Documentation/ABI/testing/dev-kmsg)
with the driver's own line (`NVRM: Xid (PCI:...): <code>, pid=..., name=..., <text>`), so the node agent reads it
exactly as it reads a real kernel log (`vigil.collector.kmsg`). Used by the demo's job and the live recovery tests'
workers; standard library only (it runs inside a training process).
"""

from __future__ import annotations

import os
import time

KERNEL_ERR = 3  # facility 0 (kernel), level 3 (err): what the driver logs an Xid at


def append_xid(path: str, code: int, text: str, *, pci: str = "0000:3b:00") -> None:
    with open(path, "a+") as fh:
        fh.seek(0)
        seq = sum(1 for line in fh if not line.startswith(" ")) + 1  # continuation lines start with a space
        fh.write(f"{KERNEL_ERR},{seq},{int(time.monotonic() * 1e6)},-;NVRM: Xid (PCI:{pci}): {code}, "
                 f"pid={os.getpid()}, name=python, {text}\n")


def xid_to_env_log(var: str, code: int, text: str) -> bool:
    """`append_xid` to the fake kernel log the environment variable `var` names; False when it names none."""
    path = os.environ.get(var)
    if not path:
        return False
    append_xid(path, code, text)
    return True

