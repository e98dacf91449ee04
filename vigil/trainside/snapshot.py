"""The in-memory snapshot's names: what the checkpointer writes and the node agent reads, held once.

    <snapshot_dir>/<rank>/snap-<step:010d>-<token:08x>/{state.pt, _COMMITTED}     a rank's own snapshots
    <snapshot_dir>/peer/<rank>/snap-.../                                         the agent's copies for peers

`vigil.recovery.checkpoint.snapshot` writes and verifies them (the marker's content is its business),
`vigil.collector.control.replicas` copies them between hosts; both take the names and the ``format`` the marker
declares from here, so a change of layout is one edit and the two sides cannot drift apart.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vigil.trainside import env

FORMAT = "vigil-snapshot/1"  # the marker's ``format``: its fields and meaning at this version
MARKER = "_COMMITTED"  # the JSON marker, written last and atomically: the snapshot is complete
STATE = "state.pt"  # the rank's state (torch.save; the agent handles it as bytes only)
PEER = "peer"  # <snapshot_dir>/peer/<rank>: copies the node agent holds for other hosts' ranks
NAME = re.compile(r"^snap-(\d{10,})-([0-9a-f]{8})$")  # one snapshot directory: step, token


def snapshot_name(step: int, token: int) -> str:
    """The directory name of the snapshot of `step` (`token`: 32 random bits, one per attempt)."""
    return f"snap-{step:010d}-{token:08x}"


def default_snapshot_dir(job_id: str) -> Path:
    """Where this host's snapshots of the job live: `VIGIL_SNAPSHOT_DIR` (set by `vigil run`: the agent's per-host
    memory, where it also puts the copies it holds for peers), else /dev/shm/vigil/<job> where /dev/shm exists
    (tmpfs), else the temp dir's vigil-shm/vigil/<job>."""
    if explicit := env.text(env.SNAPSHOT_DIR):
        return Path(explicit).expanduser()
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp")) / "vigil-shm"
    return base / "vigil" / job_id
