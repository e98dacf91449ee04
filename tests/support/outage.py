"""A broker outage that loses nothing: its process paused (SIGSTOP) for a while, then resumed (SIGCONT).

The embedded broker (Tansu) keeps its log in memory, so a real restart would lose the topics; and a TCP proxy in
front of it does not stand between it and its clients, because they learn the broker's address from its metadata
(the advertised listener, its own port: vigil/kafka/broker.py) and connect there directly after the bootstrap. A
paused process is, to every client, a broker that went away — requests time out, connections hang — and came back
with its data: the stand-in for a restart. The pause ends even when the code inside raises.
"""

from __future__ import annotations

import os
import signal
import time


def pause_broker(pid: int, seconds: float) -> None:
    """Stop the broker process `pid` for `seconds` (the fault's length, the one fixed wait), then resume it."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
