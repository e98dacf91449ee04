"""The rendezvous of a recovery-controlled job, filled into its torchrun command line.

`vigil run --nodes MIN:MAX [--node-multiple N] -- torchrun ... train.py` launches nothing by
itself: the recovery controller sends each agent a `start` command with a `World` (the
hosts in node-rank order, this host's node rank, the master's address and port, a new
generation per restart), and `fill` rewrites the torchrun options for it: any rendezvous
options the user gave (`--nnodes`, `--node-rank`, `--master-addr`, `--master-port`,
`--rdzv-*`, `--standalone`) and `--max-restarts` are replaced by the world's, with
`--max-restarts 0` (vigil restarts the job itself; torchrun's own restarts of a static
rendezvous are not coherent across nodes). A command that is not torchrun gets the same
facts in its environment only (`rendezvous_env`). Where torchrun's options are comes from
`torchrun.scan`. Pure logic, but for `free_ports`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from vigil.collector.control.torchrun import scan
from vigil.contract import World
from vigil.trainside import env

REPLACED = frozenset({"--nnodes", "--node-rank", "--master-addr", "--master-port", "--rdzv-backend",
                      "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf", "--standalone", "--max-restarts"})


@dataclass(frozen=True, kw_only=True)
class NodeRange:
    """How many nodes the job accepts: MIN..MAX, a multiple of `multiple`."""

    min: int
    max: int
    multiple: int = 1

    @classmethod
    def parse(cls, text: str, multiple: int = 1) -> NodeRange:
        """`"2:4"` or `"3"` (exactly 3); ValueError naming the problem."""
        lo, sep, hi = text.partition(":")
        try:
            low, high = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"--nodes: expected MIN:MAX or N, got {text!r}") from None
        if not 1 <= low <= high:
            raise ValueError(f"--nodes: need 1 <= MIN <= MAX, got {text!r}")
        if multiple < 1 or multiple > high:
            raise ValueError(f"--node-multiple: need 1 <= N <= MAX ({high}), got {multiple}")
        return cls(min=low, max=high, multiple=multiple)


def fill(argv: Sequence[str], world: World) -> list[str]:
    """`argv` with torchrun's rendezvous options set to `world` (unchanged when not torchrun)."""
    opts = scan(argv)
    if opts is None:
        return list(argv)
    kept: list[str] = []
    for name, first, end in opts.spans:
        if name not in REPLACED:
            kept += argv[first:end]
    ours = ["--nnodes", str(world.nnodes), "--node-rank", str(world.node_rank), "--master-addr", world.master_addr,
            "--master-port", str(world.master_port), "--max-restarts", "0"]
    return [*argv[:opts.start], *ours, *kept, *argv[opts.end:]]


def rendezvous_env(world: World) -> dict[str, str]:
    """The world for the training command's environment (also set for torchrun commands)."""
    return {env.GENERATION: str(world.generation), env.NNODES: str(world.nnodes),
            env.NODE_RANK: str(world.node_rank), env.MASTER_ADDR: world.master_addr,
            env.MASTER_PORT: str(world.master_port), env.HOSTS: ",".join(world.hosts),
            **({} if world.restore_max_step is None else {env.RESTORE_MAX_STEP: str(world.restore_max_step)})}


def free_ports(count: int, host: str = "") -> list[int]:
    """`count` ports nothing listens on right now (bound once and released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()
