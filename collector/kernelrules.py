"""What a kernel log record says about the host's hardware: Xid/SXid, PCIe AER, NIC link, EDAC/MCE, OOM-killer.

Pure: `classify_kernel(message)` returns a `KernelFact` (category, severity, catalog action, the PCI address,
pid and Xid it names) or None. Patterns are RE2 (linear in the message, which the reader bounds), tried only
when a cheap keyword occurs. An Xid's severity and action come from the catalog (`vigil.contract.xid`); an
SXid (NVSwitch) is fatal or not as the driver says. Line formats:

* `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
* `nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error`
* `pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0`
* `mlx5_core 0000:5e:00.0 ibp94s0: Link down` / `mlx5_core 0000:5e:00.0: Port module event ... Cable unplugged`
* `EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 ...` (CE: corrected)
* `mce: [Hardware Error]: Machine check events logged`
* `Out of memory: Killed process 1234 (python) total-vm:...` and
  `oom-kill:constraint=CONSTRAINT_NONE,...,task_memcg=/job,task=python,pid=1234,uid=0`
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2

from vigil.contract.severity import Severity
from vigil.contract.xid import XidAction, xid_entry


@dataclass(frozen=True, kw_only=True)
class KernelFact:
    category: str
    severity: Severity
    action: XidAction | None = None
    xid: int | None = None
    pci: str = ""
    pid: int | None = None


def _pid(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and int(value) < 2**32 else None


def _xid(m: Any) -> KernelFact:
    entry = xid_entry(int(m["xid"][:9]))
    return KernelFact(category="xid", severity=entry.severity, action=entry.action, xid=entry.code, pci=m["pci"],
                      pid=_pid(m["pid"]))


def _sxid(m: Any) -> KernelFact:
    fatal = (m["kind"] or "").lower() == "fatal"
    return KernelFact(category="sxid", severity="critical" if fatal else "warning",
                      action=XidAction.CORDON if fatal else XidAction.WATCH, pci=m["pci"])


def _aer(m: Any) -> KernelFact:
    kind = (m["kind"] or "").lower()
    severity: Severity = "critical" if "fatal" in kind and "non" not in kind else \
        "error" if m["which"] == "Uncorrected" else "warning"
    action = XidAction.REBOOT_THEN_CHECK if severity == "critical" else XidAction.WATCH
    return KernelFact(category="pcie_aer", severity=severity, action=action, pci=m["dev"] or m["port"])


def _link(m: Any) -> KernelFact:
    return KernelFact(category="nic_link_down", severity="error", action=XidAction.WATCH, pci=m["pci"] or "")


def _edac(m: Any) -> KernelFact:
    ue = m["kind"] == "UE"
    return KernelFact(category="host_memory", severity="critical" if ue else "warning",
                      action=XidAction.CORDON if ue else XidAction.WATCH)


def _mce(m: Any) -> KernelFact:
    return KernelFact(category="mce", severity="error", action=XidAction.INVESTIGATE)


def _oom(m: Any) -> KernelFact:
    return KernelFact(category="oom", severity="error", action=XidAction.RESTART_JOB, pid=_pid(m["pid"]))


_PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
RULES: tuple[tuple[str, Any, Callable[[Any], KernelFact]], ...] = (
    ("SXid", re2.compile(rf"^[\w.-]+: SXid \(PCI:(?P<pci>{_PCI})\): (?P<sxid>\d+), (?P<kind>Fatal|Non-fatal|Non-Fatal)?"),
     _sxid),
    ("Xid", re2.compile(rf"^NVRM: Xid \(PCI:(?P<pci>{_PCI})\): (?P<xid>\d+)(?:, pid=(?P<pid>\d+|'<unknown>'))?"),
     _xid),
    ("AER", re2.compile(rf"^(?:[\w.-]+ )?(?P<port>{_PCI})?: AER: (?P<which>Uncorrected|Corrected|Multiple Uncorrected|Multiple "
                        rf"Corrected) (?:\((?P<kind>Fatal|Non-Fatal)\) )?error(?:s)? received: (?P<dev>{_PCI})?"),
     _aer),
    ("mlx5", re2.compile(rf"^mlx5_core (?P<pci>{_PCI})?.*(?:\bLink down\b|Cable unplugged|\bport \d+ .*\bDOWN\b)"),
     _link),
    ("EDAC", re2.compile(r"^EDAC (?:MC\d+|\w+): \d+ (?P<kind>CE|UE) "), _edac),
    ("mce:", re2.compile(r"^mce: \[Hardware Error\]: (?:Machine check|CPU \d+: Machine Check)"), _mce),
    ("Killed process", re2.compile(r"^Out of memory(?: \(oom_kill_allocating_task\))?: Killed process "
                                   r"(?P<pid>\d+)"), _oom),
    ("oom-kill:", re2.compile(r"^oom-kill:.*\bpid=(?P<pid>\d+)"), _oom),
)


_QUOTES_A_PROCESS = re2.compile(r"^[^\n]{1,16}\[\d+\]: ")
"""`<comm>[<pid>]: ...`: the kernel quoting a process (a segfault, a trap), whose name and mapped file names the
process chose itself: never a hardware fact."""


def classify_kernel(message: str) -> KernelFact | None:
    """The hardware fact a kernel log message states, if any (first rule whose keyword and pattern match).

    Every rule is anchored at the start of the message, where the driver that reports the fault names itself
    (`NVRM:`, `mlx5_core`, `EDAC`, ...): text the kernel quotes from a process (a file name in a segfault report,
    its 15-character name) can contain such words anywhere but there (an attacker's review found a segfault in a
    file named like an Xid line classified as the Xid)."""
    candidates = [rule for rule in RULES if rule[0] in message]  # plain substring tests: most records are noise
    if not candidates or _QUOTES_A_PROCESS.search(message):
        return None
    for _keyword, pattern, make in candidates:
        m = pattern.search(message)
        if m is not None:
            return make(m)
    return None
