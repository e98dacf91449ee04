"""What a rank's own last error says about the cause: a peer's failure, a teardown, or its own fault.

When one rank of a synchronous job dies, its peers fail a moment later with communication
errors ("Connection closed by peer", "Timed out waiting 30000ms for recv", NCCL watchdog
timeouts) and the launcher tears down the rest (SIGTERM). Those are consequences. Anything
else a rank died of (an exception of its own, SIGKILL, SIGSEGV, an exit code) is its own
fault and makes it a culprit candidate. Messages also hint at the cause class: network
(InfiniBand / RDMA errors), software (any other error of its own).

Hardware is never read from a rank's own text (issue 49): a training process that raises
"Xid 79" or "uncorrectable NVLink error" makes a claim about itself, which the incident keeps
as evidence (`claims_hardware`) but which decides nothing. Only what the hardware reported of
that host (`error_log` findings whose `source` is kernel, nvml or sysfs and whose catalog
action takes the GPU or host out: `host_fault`) makes the cause hardware. Pure logic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from vigil.contract.xid import decides, fault_classes

if TYPE_CHECKING:
    from vigil.analyzer.detect.base import Finding

Kind = Literal["peer", "teardown", "own"]
Cause = Literal["hardware", "network", "software", "unknown"]

PEER = re.compile(
    r"Connection closed by peer|Connection reset by peer|Timed out waiting \d+ ?ms for (?:recv|send)"
    r"|connectFullMesh failed|Watchdog caught collective operation timeout|NCCL communicator was aborted"
    r"|ncclRemoteError|remote process exited or there was a network error|ProcessGroupNCCL.*(?:timed? ?out|abort)"
    r"|Broken pipe|DistNetworkError|RendezvousClosedError|(?:gloo|nccl).*(?:timed? ?out)", re.IGNORECASE)
TIMEOUT = re.compile(r"Timed out waiting|Watchdog caught collective operation timeout|timed? ?out", re.IGNORECASE)
TEARDOWN_MESSAGE = re.compile(r"Signal \d+ \(SIG(?:TERM|INT|HUP)\) received|SignalException|got signal: (?:15|2|1)\b")
TEARDOWN_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
HARDWARE = re.compile(r"nvlink|\bxid\b|\becc\b|uncorrectable|fallen off the bus|GPU is lost|double[- ]bit|row remap",
                      re.IGNORECASE)
NETWORK = re.compile(r"NET/IB|ibv_\w+|\bRDMA\b|link (?:is )?down|Network is unreachable|No route to host|\bmlx5",
                     re.IGNORECASE)
HARDWARE_CATEGORIES = frozenset({"xid", "ecc", "nvlink"})


def host_fault(evidence: Mapping[str, Any]) -> bool:
    """Whether an `error_log` finding is a hardware fault of its host: what the hardware itself reported (`source`
    kernel, nvml, sysfs) and the Xid catalog's action takes out (`host_fault`). A finding without a source (from
    before sources were told apart: the training process's own output) or a process's claim never is."""
    return decides(str(evidence.get("source", "process"))) and evidence.get("host_fault") is True


def hardware_classes(findings: Sequence[Finding]) -> list[str]:
    """The fault classes (`vigil.contract.xid.fault_classes`) of a culprit's attested hardware findings: what the
    recovery controller's fleet memory counts repeats of."""
    return sorted({c for f in findings for c in fault_classes(str(f.evidence.get("category", "")),
                                                              f.evidence.get("xids") or ())})


def kind_of(message: str, signal: str | None) -> Kind:
    """Whether a failed rank's own last error is a peer's failure, a teardown, or its own fault."""
    if message and PEER.search(message):
        return "peer"
    if (signal in TEARDOWN_SIGNALS and (not message or TEARDOWN_MESSAGE.search(message))) or \
            (message and TEARDOWN_MESSAGE.search(message)):
        return "teardown"
    return "own"


def is_timeout(message: str) -> bool:
    return bool(message) and bool(TIMEOUT.search(message))


def claims_hardware(message: str) -> bool:
    """Whether a rank's own text claims a hardware fault: evidence to show, never a cause (see the module's doc)."""
    return bool(message) and bool(HARDWARE.search(message))


def cause_of(message: str, *, hardware_lines: bool = False) -> Cause:
    """Hardware only when the host's attested lines say so (`hardware_lines`, see `host_fault`), never from the
    rank's own text; network or software from that text (unknown: no message)."""
    if hardware_lines:
        return "hardware"
    if message and NETWORK.search(message):
        return "network"
    return "software" if message else "unknown"
