"""The job's shape: N hosts x G GPUs, ranks laid out tensor-parallel within a host.

Global rank = host * G + local rank. Megatron order: tp varies fastest, then dp,
then pp, so with tp = G every host holds one (dp, pp) group and the hosts of a
pipeline stage are contiguous. A smaller tp (it must divide G) puts G / tp
tensor-parallel groups, each its own data-parallel replica, on every host.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.contract import ParallelCoords, RankPlacement


@dataclass(frozen=True, kw_only=True)
class Layout:
    hosts: int
    gpus_per_host: int = 8
    pp: int = 1
    tp_size: int | None = None  # None: one tensor-parallel group per host (tp = gpus_per_host)
    host_prefix: str = "sim-host-"

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.gpus_per_host < 1 or self.pp < 1:
            raise ValueError("hosts, gpus per host and pp must be >= 1")
        if self.tp_size is not None and (self.tp_size < 1 or self.gpus_per_host % self.tp_size):
            raise ValueError(f"--tp {self.tp_size} must divide --gpus {self.gpus_per_host}")
        if self.hosts % self.pp:
            raise ValueError(f"--pp {self.pp} must divide --hosts {self.hosts}")
        if not self.host_prefix:
            raise ValueError("--host-prefix must not be empty")

    @property
    def tp(self) -> int:
        return self.tp_size or self.gpus_per_host

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp)

    @property
    def world_size(self) -> int:
        return self.hosts * self.gpus_per_host

    def host_name(self, index: int) -> str:
        return f"{self.host_prefix}{index:04d}"

    def host_names(self) -> list[str]:
        return [self.host_name(i) for i in range(self.hosts)]

    def host_index(self, name: str) -> int:
        if not name.startswith(self.host_prefix) or not name[len(self.host_prefix):].isdigit():
            raise ValueError(f"unknown host {name!r}: hosts are {self.host_name(0)} .. {self.host_name(self.hosts - 1)}")
        i = int(name[len(self.host_prefix):])
        if i >= self.hosts:
            raise ValueError(f"unknown host {name!r}: hosts are {self.host_name(0)} .. {self.host_name(self.hosts - 1)}")
        return i

    def coords(self, rank: int) -> ParallelCoords:
        tp = rank % self.tp
        dp = (rank // self.tp) % self.dp
        pp = rank // (self.tp * self.dp)
        return ParallelCoords(tp=tp, dp=dp, pp=pp)

    def stage_of_host(self, index: int) -> int:
        return self.coords(index * self.gpus_per_host).pp

    def placements(self) -> list[RankPlacement]:
        g = self.gpus_per_host
        return [RankPlacement(rank=r, host=self.host_name(r // g), local_rank=r % g, coords=self.coords(r))
                for r in range(self.world_size)]
