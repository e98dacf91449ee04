"""A small transformer trained data-parallel on CPU (gloo), instrumented with `StepTimer`.

Launched by torchrun under `vigil run` (which sets VIGIL_JOB_ID / VIGIL_HOST /
VIGIL_SPOOL_DIR). Gradients are averaged with one all-reduce after the backward pass,
timed as its own phase `grad_sync` (a comm phase by name): in synchronous training the
ranks that wait for a slow peer wait *there*, and their forward/backward stay honest
(DDP would overlap the all-reduce with backward, folding the wait into `backward`).

For the demo one rank is slowed part-way through (its forward pass takes longer, as a
fail-slow GPU would: its host is the straggler, the others wait in `grad_sync`), another
prints an Xid-style driver error line once (with `--xid-dies` it then dies of a CUDA error,
as a rank whose GPU fell off the bus does), and later one rank hangs (a stuck GPU: it never
joins the next all-reduce; with `--hang-once` only the first time) until the process
group's timeout ends the job or the recovery controller restarts it. Every rank reports a replica digest every
`--digest-every` steps; with `--flip-rank` one rank flips one bit of one weight after step `--flip-at` (silent data
corruption: the analyzer's replica_mismatch names it by majority, the controller rolls back and replays). With `--ckpt-dir` it
saves a two-phase checkpoint every `--ckpt-every` steps (`vigil.recovery.checkpoint`) and an
in-memory snapshot every step (where the agent says: VIGIL_SNAPSHOT_DIR), and, when started
again, resumes from the freshest state every rank can obtain (a snapshot, else the checkpoint). The data is a synthetic dataset
of `--samples` sequences (sample i is drawn from a generator seeded by i) read through
`vigil.data.ElasticSampler`, checkpointed with the model: a resume on another number of ranks
re-splits the rest of the epoch (rank 0 prints how many samples, and reports it in the `job`
event's `data`, with whether the re-split covers the epoch exactly once) and reads each sample
once along the committed steps. Under recovery control (`vigil
run --nodes`, which sets VIGIL_HOSTS) rank 0 registers the job's topology through the spool
at every start, so a restart on fewer hosts is known as such.

    python -m torch.distributed.run --nproc-per-node 2 vigil/app/demo/train.py --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from vigil.app.demo.fakekmsg import xid_to_env_log
from vigil.data import ElasticSampler
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState
from vigil.timer import StepTimer, TimerConfig


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        block = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        out: torch.Tensor = self.head(self.blocks(x))
        return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=0, help="0 = until stopped")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--samples", type=int, default=1 << 20, help="samples in the synthetic dataset (an epoch)")
    p.add_argument("--shard-size", type=int, default=256, help="samples per shard (vigil.data)")
    p.add_argument("--data-mode", choices=["static", "dynamic"], default="static", help="vigil.data sharding")
    p.add_argument("--slow-rank", default="-1", help="global rank to slow down")
    p.add_argument("--slow-from", type=int, default=30, help="step from which it is slow")
    p.add_argument("--slow-ms", type=float, default=60.0, help="extra forward time of the slow rank")
    p.add_argument("--xid-rank", default="-1", help="global rank (or HOST:LOCAL_RANK) that prints an Xid line")
    p.add_argument("--xid-at", type=int, default=20, help="step at which it prints it")
    p.add_argument("--xid-dies", action="store_true", help="the Xid rank then dies with a CUDA error")
    p.add_argument("--xid-once", default="", help="a file: the Xid fires only if it does not exist (it is created)")
    p.add_argument("--peak-tflops", type=float, default=0.05, help="the 'GPU' peak used for MFU on CPU")
    p.add_argument("--hang-rank", default="-1", help="global rank (or HOST:LOCAL_RANK) that hangs")
    p.add_argument("--hang-at", type=int, default=300, help="step before which it hangs")
    p.add_argument("--hang-once", default="", help="a file: the hang happens only if it does not exist (it is created)")
    p.add_argument("--digest-every", type=int, default=10, help="steps between replica digests (0: none)")
    p.add_argument("--flip-rank", default="-1", help="global rank (or HOST:LOCAL_RANK) that flips one parameter bit")
    p.add_argument("--flip-at", type=int, default=40, help="step after whose update it flips it (silent corruption)")
    p.add_argument("--flip-once", default="", help="a file: the flip happens only if it does not exist (it is created)")
    p.add_argument("--pg-timeout-s", type=float, default=1800.0, help="process group (collective) timeout")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint here (shared by every rank); resume from it")
    p.add_argument("--ckpt-every", type=int, default=20, help="steps between checkpoints")
    p.add_argument("--ckpt-keep", type=int, default=3, help="newest checkpoints kept (a rollback needs an older one)")
    return p.parse_args(argv)


def picked(spec: str, rank: int) -> bool:
    """`spec` names this process: a global rank, or HOST:LOCAL_RANK (stable when a restart reorders the hosts)."""
    if ":" in spec:
        host, local = spec.rsplit(":", 1)
        return os.environ.get("VIGIL_HOST") == host and os.environ.get("LOCAL_RANK", "0") == local
    return int(spec) == rank


def first_time(marker: str) -> bool:
    """True unless `marker` names a file that exists (then it is created: the next time is not the first)."""
    if not marker:
        return True
    try:
        Path(marker).touch(exist_ok=False)
        return True
    except FileExistsError:
        return False


def driver_xid(code: int, text: str) -> bool:
    """The demo's stand-in for the NVIDIA driver: append an Xid record, in the kernel's `/dev/kmsg` format, to this
    host's fake kernel log (`DEMO_FAKE_KMSG`), which its agent follows; False when there is none."""
    return xid_to_env_log("DEMO_FAKE_KMSG", code, text)


def register_job(args: argparse.Namespace, world: int, data: dict[str, object] | None = None) -> None:
    """Rank 0 under recovery control: the job's topology as a `job` event line in the spool (the agent ships it),
    with what the data sampler re-split at this start (`data`)."""
    hosts = [h for h in os.environ.get("VIGIL_HOSTS", "").split(",") if h]
    spool = os.environ.get("VIGIL_SPOOL_DIR")
    if not hosts or not spool:
        return
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    doc = {"kind": "job", "schema_version": 1, "event_id": uuid.uuid4().hex,
           "job_id": os.environ.get("VIGIL_JOB_ID", "default"), "host": hosts[0], "ts": time.time(),
           "name": "tiny transformer, data-parallel on CPU (gloo)", "world_size": world, "dp": world, "gpus_per_host": local,
           "gpu_model": "cpu", "gpu_peak_tflops": args.peak_tflops,
           "ranks": [{"rank": r, "host": hosts[min(r // local, len(hosts) - 1)], "local_rank": r % local,
                      "coords": {"dp": r, "tp": 0, "pp": 0}} for r in range(world)], "data": data}
    path = Path(spool) / f"job-g{os.environ.get('VIGIL_GENERATION', '0')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")


def data_segment(sampler: ElasticSampler) -> dict[str, object] | None:
    """The `data` of the job event: what the sampler's current segment re-split (None before its first batch)."""
    seg = sampler.segment
    if seg is None:
        return None
    return {"epoch": sampler.epoch, "ranks": seg.world_size, "samples_left": seg.samples, "samples_done": seg.done,
            "in_flight": seg.in_flight, "exact": seg.exact}


def sample_tokens(ids: list[int], vocab: int, seq: int) -> torch.Tensor:
    """The batch of sample ids `ids`: sample i is always the same sequence (a generator seeded by i)."""
    if not ids:
        return torch.zeros((0, seq + 1), dtype=torch.long)
    return torch.stack([torch.randint(0, vocab, (seq + 1,), generator=torch.Generator().manual_seed(i)) for i in ids])


def flip_bit(model: nn.Module) -> None:
    """One bit of one weight flipped in place, as a faulty GPU's memory or ALU would (no NaN, no error)."""
    with torch.no_grad():
        weight = next(iter(model.parameters()))
        weight.view(-1).view(torch.int32)[101] ^= 1 << 12


def average_gradients(model: nn.Module, world: int) -> None:
    """One all-reduce of every gradient, flattened (what DDP does in buckets, without the overlap)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyLM(args.vocab, args.dim, args.layers, 4, args.seq)
    for p in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(p.data, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = sum(p.numel() for p in model.parameters())
    tokens_per_step = args.batch * args.seq
    sampler = ElasticSampler(args.samples, args.batch, shard_size=args.shard_size, seed=0, mode=args.data_mode)
    # a snapshot every step, whatever the budget says: the demo shows a fault costing one step (8 MiB per rank is
    # ~1 % of its step alone, but ~15 processes share the demo's 2 CPUs and could stretch the chosen interval)
    ckpt = Checkpointer(CheckpointConfig(directory=args.ckpt_dir, keep=args.ckpt_keep, dp_group="world",
                                         snapshot_budget=None)) if (
        args.ckpt_dir) else None
    state = {"train": TrainState(model, opt), "data": sampler}
    resumed = ckpt.load_latest(state) if ckpt is not None else None  # every rank, at the same point
    step = 0 if resumed is None else resumed + 1
    if resumed is not None and rank == 0 and ckpt is not None and ckpt.last_restore is not None:
        print(f"resumed from step {resumed} ({ckpt.last_restore.source})", flush=True)
    batches = sampler.batches()
    first = next(batches, None)  # from the first batch on, the segment says what this start re-split
    if rank == 0:
        register_job(args, world, data_segment(sampler))
        if resumed is not None and (seg := sampler.segment) is not None:
            print(f"data: {seg.samples} samples left in epoch {sampler.epoch} re-split over {seg.world_size} ranks "
                  f"({seg.in_flight} shards were read part-way, {seg.done} read before; "
                  f"{'none lost or repeated' if seg.exact else 'NOT covering the epoch exactly once'})", flush=True)
    timer = StepTimer(TimerConfig(flops_per_step=6.0 * params * tokens_per_step, gpu_peak_tflops=args.peak_tflops,
                                  coords={"dp": rank, "tp": 0, "pp": 0}, start_step=step,
                                  digest_every=max(args.digest_every, 0)))
    try:
        while args.steps == 0 or step < args.steps:
            if picked(args.hang_rank, rank) and step >= args.hang_at and first_time(args.hang_once):
                print(f"rank {rank} hangs before step {step} (a stuck GPU)", flush=True)
                while True:  # its peers wait in the next all-reduce until the process group times out
                    time.sleep(3600)
            ids, first = (first, None) if first is not None else (next(batches, None), None)
            if ids is None:  # the epoch is done on every rank at the same step
                sampler.set_epoch(sampler.epoch + 1)
                batches = sampler.batches()
                ids = next(batches)
            with timer.step(tokens=len(ids) * args.seq, samples=len(ids)):
                with timer.phase("data"):
                    batch = sample_tokens(ids, args.vocab, args.seq)
                with timer.phase("forward"):
                    logits = model(batch[:, :-1])
                    loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1),
                                                       reduction="sum") / max(len(ids) * args.seq, 1)  # 0 if empty
                    if picked(args.slow_rank, rank) and step >= args.slow_from:
                        time.sleep(args.slow_ms / 1000)
                with timer.phase("backward"):
                    opt.zero_grad(set_to_none=True)
                    loss.backward()  # type: ignore[no-untyped-call]
                with timer.phase("grad_sync", kind="comm"):  # the others wait here for a slow rank
                    average_gradients(model, world)
                with timer.phase("optimizer"):
                    opt.step()
                if picked(args.flip_rank, rank) and step == args.flip_at and first_time(args.flip_once):
                    flip_bit(model)
                    print(f"rank {rank} flips one bit of one weight after step {step} (silent data corruption)",
                          flush=True)
                timer.digest(model.parameters())  # every --digest-every steps: replicas must agree
            if picked(args.xid_rank, rank) and step >= args.xid_at and first_time(args.xid_once):
                if not driver_xid(79, "GPU has fallen off the bus."):  # the kernel's word; else a printed claim
                    print(f"NVRM: Xid (PCI:0000:3b:00): 79, pid={os.getpid()}, GPU has fallen off the bus.",
                          file=sys.stderr, flush=True)
                if args.xid_dies:
                    raise RuntimeError("CUDA error: unspecified launch failure (the GPU fell off the bus)")
            if rank == 0 and step % 20 == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            if ckpt is not None:
                ckpt.snapshot(step, state)  # every step, rank-local: a copy into host memory, written on a thread
            if ckpt is not None and step > 0 and step % args.ckpt_every == 0:
                ckpt.save(step, state)  # returns once the state is in host memory
            step += 1
    except KeyboardInterrupt:
        pass
    finally:
        timer.close()
        if ckpt is not None:
            ckpt.close()  # waits for a save still persisting; before the process group goes
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
