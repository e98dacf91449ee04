"""A stand-in training command for recovery tests that need a job's life but not its maths.

Writes one `step` record every `--step-ms` to the step timer's spool (`VIGIL_SPOOL_DIR`), as
`StepTimer` would, starting at step `--start` (default: `VIGIL_GENERATION` x 1000, so every
generation's first step is recognisable), until it is stopped. No torch: it starts in a blink.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--step-ms", type=float, default=200.0)
    p.add_argument("--start", type=int, default=-1)
    args = p.parse_args()
    host = os.environ.get("VIGIL_HOST", "host")
    gen = int(os.environ.get("VIGIL_GENERATION", "0"))
    rank = int(os.environ.get("VIGIL_NODE_RANK", "0"))
    spool = Path(os.environ["VIGIL_SPOOL_DIR"])
    spool.mkdir(parents=True, exist_ok=True)
    out = spool / f"{host}-rank{rank}.{gen:06d}.jsonl"
    step = args.start if args.start >= 0 else gen * 1000
    print(f"fake training on {host}: generation {gen}, node rank {rank}, from step {step}", flush=True)
    with open(out, "a") as fh:
        while True:
            time.sleep(args.step_ms / 1000)
            rec = {"kind": "step", "schema_version": 1, "event_id": uuid.uuid4().hex,
                   "job_id": os.environ.get("VIGIL_JOB_ID", "default"), "host": host, "ts": time.time(), "rank": rank,
                   "local_rank": 0, "world_size": int(os.environ.get("VIGIL_NNODES", "1")), "step": step,
                   "step_ms": args.step_ms, "phases": {"compute": args.step_ms}}
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            step += 1


if __name__ == "__main__":
    raise SystemExit(main())
