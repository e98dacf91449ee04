"""NVIDIA's Xid catalog as data: what each code means, its likely cause and the action it calls for.

The table is `xid_catalog.csv` beside this module (reviewed against NVIDIA's public Xid documentation,
https://docs.nvidia.com/deploy/xid-errors/): code, name, cause, action, severity, note. The collector stamps
the action on the events it classifies, the analyzer's alerts quote it, and the recovery controller decides by
it: `restart_job` restarts the job without taking a host out (an application fault), `reset_gpu` resets the GPU
(where no reset is available, the host is cordoned), `cordon` and `reboot_then_check` take the host out,
`watch` raises nothing beyond a warning. A code the table does not hold is `hardware` / `investigate`.

The action applies only to what the kernel or NVML reported (`source` kernel or nvml): a training process
that prints an `NVRM: Xid` line makes a claim about itself, never a kernel fact (`decides`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Literal, get_args

from vigil.contract.severity import SEVERITIES, Severity

LogSource = Literal["kernel", "nvml", "sysfs", "process"]
"""Where a fact came from: the kernel log, NVML, sysfs, or a training process's own output (a claim)."""
LOG_SOURCES: tuple[str, ...] = get_args(LogSource)
ATTESTED_SOURCES = frozenset({"kernel", "nvml", "sysfs"})
"""Sources the agent read from the hardware's own reporting; `process` is what the training code printed."""


class XidCause(StrEnum):
    APPLICATION = "application"
    DRIVER = "driver"
    HARDWARE = "hardware"
    NVLINK = "nvlink"
    MEMORY = "memory"
    GSP = "gsp"
    PCIE = "pcie"


class XidAction(StrEnum):
    RESTART_JOB = "restart_job"
    RESET_GPU = "reset_gpu"
    CORDON = "cordon"
    REBOOT_THEN_CHECK = "reboot_then_check"
    INVESTIGATE = "investigate"
    WATCH = "watch"


HOST_ACTIONS = frozenset({XidAction.RESET_GPU, XidAction.CORDON, XidAction.REBOOT_THEN_CHECK, XidAction.INVESTIGATE})
"""Actions that take the GPU (and, without a per-GPU reset, its host) out of the job: a hardware recovery."""


@dataclass(frozen=True, kw_only=True)
class XidEntry:
    code: int
    name: str
    cause: XidCause
    action: XidAction
    severity: Severity
    note: str = ""
    known: bool = True

    @property
    def host_fault(self) -> bool:
        return self.action in HOST_ACTIONS


COLUMNS = ("code", "name", "cause", "action", "severity", "note")


def parse_catalog(text: str) -> dict[int, XidEntry]:
    """The table's rows by code; ValueError naming the row for a bad code, cause, action, severity or duplicate."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"xid catalog: columns must be {','.join(COLUMNS)}, got {reader.fieldnames}")
    out: dict[int, XidEntry] = {}
    for n, row in enumerate(reader, start=2):
        try:
            code = int(row["code"])
            if code < 1 or code in out:
                raise ValueError(f"code {code} is {'a duplicate' if code in out else 'not positive'}")
            if row["severity"] not in SEVERITIES:
                raise ValueError(f"severity {row['severity']!r} is not one of {', '.join(SEVERITIES)}")
            out[code] = XidEntry(code=code, name=row["name"].strip(), cause=XidCause(row["cause"]),
                                 action=XidAction(row["action"]), severity=row["severity"],  # type: ignore[arg-type]
                                 note=(row["note"] or "").strip())
        except (ValueError, TypeError) as exc:
            raise ValueError(f"xid catalog line {n}: {exc}") from None
    return out


@cache
def catalog() -> dict[int, XidEntry]:
    """The reviewed table shipped with vigil (read once)."""
    return parse_catalog(resources.files("vigil.contract").joinpath("xid_catalog.csv").read_text(encoding="utf-8"))


def xid_entry(code: int) -> XidEntry:
    """The catalog's entry for `code`; an unknown code is hardware, investigate (critical)."""
    known = catalog().get(code)
    if known is not None:
        return known
    return XidEntry(code=code, name=f"Xid {code} (not in the catalog)", cause=XidCause.HARDWARE,
                    action=XidAction.INVESTIGATE, severity="critical", known=False)


def decides(source: str) -> bool:
    """Whether a fact from `source` may decide (the catalog's action applies); a process's claim never does."""
    return source in ATTESTED_SOURCES


def fault_classes(category: str, xids: Iterable[int | None] = ()) -> list[str]:
    """The classes of a hardware fact fleet memory counts repeats of: each Xid's catalog cause (`xid:memory`,
    `xid:nvlink`), else the fact's category (`ecc`, `gpu_lost`, `ib_symbol_errors`)."""
    codes = {x for x in xids if x is not None}
    if codes:
        return sorted({f"xid:{xid_entry(x).cause.value}" for x in codes})
    return [category] if category else []
