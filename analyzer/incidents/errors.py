"""What a rank's own last error says about the cause: a peer's failure, a teardown, or its own fault.

When one rank of a synchronous job dies, its peers fail a moment later with communication
errors ("Connection closed by peer", "Timed out waiting 30000ms for recv", NCCL watchdog
timeouts) and the launcher tears down the rest (SIGTERM). Those are consequences. Anything
else a rank died of (an exception of its own, SIGKILL, SIGSEGV, an exit code) is its own
fault and makes it a culprit candidate. Messages also hint at the cause class: hardware
(NVLink, Xid, ECC, a GPU off the bus), network (InfiniBand / RDMA errors), software (any
other error of its own). Pure logic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

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
    """Whether an `error_log` finding is a hardware fault of its host: what the hardware reported and the Xid
    catalog's action takes out (`evidence.host_fault`); a finding from before sources were told apart: its
    category."""
    if "host_fault" in evidence:
        return bool(evidence["host_fault"])
    return evidence.get("category") in HARDWARE_CATEGORIES


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


def cause_of(message: str, *, hardware_lines: bool = False) -> Cause:
    """Hardware when the message or the host's own lines say so, network, else software (unknown: no message)."""
    if hardware_lines or (message and HARDWARE.search(message)):
        return "hardware"
    if message and NETWORK.search(message):
        return "network"
    return "software" if message else "unknown"
