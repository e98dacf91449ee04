"""Which GPUs a generation's ranks may use: the host's GPUs less the quarantined ones (per-GPU quarantine).

The node backend can take single GPUs of a host out (`NodeBackend.quarantine`: the local registry's `gpus`
list, or the start command's `World.quarantined_gpus`). The agent then starts the generation with
`CUDA_VISIBLE_DEVICES` listing the host's other GPUs and `CUDA_DEVICE_ORDER=PCI_BUS_ID` (the quarantine names
NVML indices, which are PCI bus order; CUDA's default order is fastest first). The host's GPUs are the
agent's own `CUDA_VISIBLE_DEVICES` when it is a list of indices, else what NVML or sysfs enumerate, else one
per local rank. When fewer GPUs are left than torchrun's `--nproc-per-node`, the argv asks for as many
workers as there are GPUs: torchrun assigns global ranks from each node's local world size, so the job's world
shrinks by the quarantined GPUs, the way it shrinks by cordoned hosts (`--nodes MIN:MAX`). No GPU left: the
start is refused with the reason. A warm start (`collector.control.warm`) gets the same environment: its
interpreters imported torch without initialising CUDA, so `CUDA_VISIBLE_DEVICES` set before the script runs
holds; a lowered `--nproc-per-node` starts cold (the warm launcher assigns ranks as if every node ran as many
workers). Pure logic.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from vigil.collector.control.torchrun import nproc_per_node, scan

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"


@dataclass(frozen=True, kw_only=True)
class Devices:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the generation's environment
    nproc: int = 1  # training processes on this host
    excluded: tuple[int, ...] = ()


def host_gpus(env: Mapping[str, str], known: Sequence[int], nproc: int) -> list[int]:
    """The GPU indices this host's ranks could use (see the module's doc)."""
    listed = env.get(VISIBLE, "").split(",")
    if env.get(VISIBLE) and all(p.strip().isdigit() for p in listed):
        return [int(p) for p in listed]
    return sorted(set(known)) or list(range(nproc))


def with_nproc(argv: Sequence[str], n: int) -> list[str]:
    """`argv` with torchrun's `--nproc-per-node` set to `n` (unchanged when not torchrun)."""
    opts = scan(argv)
    if opts is None:
        return list(argv)
    out = list(argv[:opts.start])
    for name, first, end in opts.spans:
        out += ["--nproc-per-node", str(n)] if name == "--nproc-per-node" else argv[first:end]
    if not any(name == "--nproc-per-node" for name, _, _ in opts.spans):
        out += ["--nproc-per-node", str(n)]
    return [*out, *argv[opts.end:]]


def devices(argv: Sequence[str], env: Mapping[str, str], *, quarantined: Collection[int],
            known: Sequence[int] = ()) -> Devices | str:
    """The argv and environment of a generation without the `quarantined` GPUs, or why it cannot start."""
    nproc = nproc_per_node(argv)
    if not quarantined:
        return Devices(argv=list(argv), nproc=nproc)
    mine = host_gpus(env, known, nproc)
    left = [g for g in mine if g not in quarantined]
    excluded = tuple(sorted(set(quarantined) & set(mine)))
    if not left:
        return f"every GPU of this host is quarantined ({', '.join(map(str, sorted(quarantined)))})"
    n = min(nproc, len(left))
    return Devices(argv=with_nproc(argv, n) if n != nproc else list(argv), nproc=n, excluded=excluded,
                   env={VISIBLE: ",".join(map(str, left)), ORDER: "PCI_BUS_ID"})
