"""The self-check tests (MegaScale, DLRover node check), as real torch work with a time limit each.

* `gemm`: `iters` matrix multiplications of size n on this host's device (CUDA when present,
  else the CPU, one thread); GFLOP/s of the fastest iteration (other work on the host that
  preempts the test does not make it look slow). `VIGIL_DIAG_SLOWDOWN=k` (k >= 1) stretches its time k-fold, as a
  throttled GPU would: the tests' and demos' way to make a host slow.
* `alltoall`: an all-to-all among `procs` local devices. On CPU the devices are threads of
  this process, each with its own gloo process group over an in-memory store; GB/s.
* `allreduce`: an all-reduce of `mb` MiB with the other hosts of the group over TCP (gloo; NCCL
  on CUDA), timed after a barrier so that a partner's slow GEMM is not counted here; GB/s.

Each returns a `Measure` and raises `CheckFailed` with a reason when the test fails or
passes its time limit. Imports torch: run only in the diagnostics child process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore, TCPStore

from vigil.trainside import env


class CheckFailed(Exception):
    """A test failed or passed its time limit; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class Measure:
    seconds: float
    values: dict[str, float] = field(default_factory=dict)


def _device() -> torch.device:
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def slowdown() -> float:
    return max(1.0, env.number(env.DIAG_SLOWDOWN) or 1.0)


def gemm(n: int, iters: int, timeout_s: float) -> Measure:
    device = _device()
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    torch.mm(a, b)  # warm-up (kernel selection, allocation)
    _sync(device)
    best = float("inf")
    started = time.perf_counter()
    for _ in range(iters):
        t0 = time.perf_counter()
        c = torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    if time.perf_counter() - started > timeout_s:
        raise CheckFailed(f"gemm: {time.perf_counter() - started:.1f} s, over its {timeout_s:g} s limit")
    seconds = best * iters  # the fastest iteration: robust to a host's other work preempting the test
    if not torch.isfinite(c).all():
        raise CheckFailed("gemm: non-finite result")
    stretch = slowdown()
    if stretch > 1:
        time.sleep(seconds * (stretch - 1))
        seconds *= stretch
    if seconds > timeout_s:
        raise CheckFailed(f"gemm: {seconds:.1f} s, over its {timeout_s:g} s limit")
    return Measure(seconds=seconds, values={"gemm_gflops": round(2 * n**3 * iters / seconds / 1e9, 3),
                                            "gemm_s": round(seconds, 4)})


def alltoall(procs: int, elements: int, timeout_s: float) -> Measure:
    if procs < 2:
        return Measure(seconds=0.0, values={"alltoall_procs": float(procs)})
    store = HashStore()
    times: dict[int, float] = {}
    errors: list[str] = []

    def worker(rank: int) -> None:
        try:
            pg = dist.ProcessGroupGloo(PrefixStore("alltoall", store), rank, procs,
                                       timedelta(seconds=timeout_s))
            src = torch.full((procs * elements,), float(rank))
            dst = torch.empty_like(src)
            pg.alltoall_base(dst, src, [], [], dist.AllToAllOptions()).wait()  # type: ignore[attr-defined]  # connect
            t0 = time.perf_counter()
            pg.alltoall_base(dst, src, [], [], dist.AllToAllOptions()).wait()  # type: ignore[attr-defined]
            times[rank] = time.perf_counter() - t0
            expected = torch.arange(procs, dtype=dst.dtype).repeat_interleave(elements)
            if not torch.equal(dst, expected):
                errors.append(f"rank {rank}: wrong data")
        except Exception as exc:
            errors.append(f"rank {rank}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    if errors or len(times) < procs:
        raise CheckFailed(f"alltoall: {errors[0] if errors else 'timed out'}")
    seconds = max(times.values())
    nbytes = procs * elements * 4 * (procs - 1) / procs
    return Measure(seconds=seconds, values={"alltoall_gbps": round(nbytes / max(seconds, 1e-9) / 1e9, 3),
                                            "alltoall_s": round(seconds, 4)})


def allreduce(*, rank: int, size: int, master_addr: str, master_port: int, mb: float, iters: int,
              timeout_s: float) -> Measure:
    if size < 2:
        return Measure(seconds=0.0, values={"allreduce_peers": 1.0})
    device = _device()
    timeout = timedelta(seconds=timeout_s)
    try:
        store = TCPStore(master_addr, master_port, size, is_master=rank == 0, timeout=timeout)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=rank,
                                world_size=size, timeout=timeout)
    except Exception as exc:
        raise CheckFailed(f"allreduce: rendezvous with the group failed: {type(exc).__name__}: {exc}") from None
    try:
        buf = torch.ones(int(mb * 2**20 / 4), device=device)
        dist.barrier()  # the partners' GEMMs are done: time the collective only
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        _sync(device)
        seconds = time.perf_counter() - t0
        expected = float(size**iters)
        if abs(float(buf[0].item()) - expected) > 1e-3 * expected:
            raise CheckFailed(f"allreduce: wrong result {float(buf[0].item())} (expected {expected})")
    except CheckFailed:
        raise
    except Exception as exc:
        raise CheckFailed(f"allreduce: {type(exc).__name__}: {exc}") from None
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    nbytes = buf.numel() * 4 * iters * 2 * (size - 1) / size  # ring all-reduce bus bytes
    return Measure(seconds=seconds, values={"allreduce_gbps": round(nbytes / max(seconds, 1e-9) / 1e9, 3),
                                            "allreduce_s": round(seconds, 4)})
