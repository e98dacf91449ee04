"""`python -m vigil.recovery.diagnostics [--checks gemm,...] --round R --group H0,H1 --rank I --master-addr A --master-port P`

One host's part of one diagnostics round, run by its node agent for a `diagnose` command:
GEMM, intra-node all-to-all, then the all-reduce with the other hosts of its group (rank 0
hosts the group's store). Prints one `diagnostic` event per test and one `check` event for
the round (ok, elapsed: this host's own time) as JSON lines on stdout, which the agent
ships; exits 0 when every test passed, 1 otherwise. Identity from `VIGIL_JOB_ID`,
`VIGIL_HOST` (else this host's name in --group), `VIGIL_COMMAND_ID`, `VIGIL_INCIDENT_ID` (set by the agent;
`vigil.trainside.env.DIAGNOSTICS_IDENTITY`). `--serve` alone: a warm
child that imports first and takes its arguments and identity from one line of stdin (`serve`).
Either way the process is non-dumpable (`protect`): it runs the agent's code as the agent's uid, so
training code of that uid neither reads it nor writes its order through /proc or ptrace.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from vigil.trainside import env
from vigil.trainside.identity import resolve_host, resolve_job


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vigil.recovery.diagnostics", description=__doc__)
    p.add_argument("--checks", default="gemm,alltoall,allreduce", help="which checks, comma-separated")
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--group", required=True, help="the hosts tested together, comma-separated, rank order")
    p.add_argument("--rank", type=int, required=True, help="this host's index in --group")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29400)
    p.add_argument("--timeout", type=float, default=60.0, help="time limit of each test, seconds")
    p.add_argument("--gemm-size", type=int, default=384)
    p.add_argument("--gemm-iters", type=int, default=100)
    p.add_argument("--alltoall-procs", type=int, default=2)
    p.add_argument("--allreduce-mb", type=float, default=1.0)
    p.add_argument("--allreduce-iters", type=int, default=5)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from vigil.contract import Diagnostic
    from vigil.recovery.diagnostics import checks

    args = parse(argv)
    group = [h for h in args.group.split(",") if h]
    base: dict[str, Any] = {"job_id": resolve_job(), "host": resolve_host(fallback=group[args.rank]),
                            "incident_id": env.text(env.INCIDENT_ID), "command_id": env.text(env.COMMAND_ID),
                            "round": args.round, "group": group}

    def emit(test: str, ok: bool, values: dict[str, float], error: str = "") -> None:
        print(Diagnostic(test=test, ok=ok, values=values, error=error[:4096], **base).model_dump_json(), flush=True)  # type: ignore[arg-type]

    tests: list[tuple[str, Callable[[], checks.Measure]]] = [
        ("gemm", lambda: checks.gemm(args.gemm_size, args.gemm_iters, args.timeout)),
        ("alltoall", lambda: checks.alltoall(args.alltoall_procs, 64 * 1024, args.timeout)),
        ("allreduce", lambda: checks.allreduce(rank=args.rank, size=len(group), master_addr=args.master_addr,
                                               master_port=args.master_port, mb=args.allreduce_mb,
                                               iters=args.allreduce_iters, timeout_s=args.timeout)),
    ]
    wanted = {c for c in args.checks.split(",") if c}
    ok, elapsed, errors, summary = True, 0.0, [], {}
    for name, run in tests:
        if name not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            m = run()
            elapsed += m.seconds
            summary.update(m.values)
            emit(name, True, {"seconds": round(m.seconds, 4), **m.values})
        except Exception as exc:  # CheckFailed, or anything torch raised
            ok = False
            errors.append(str(exc) if isinstance(exc, checks.CheckFailed) else f"{name}: {type(exc).__name__}: {exc}")
            emit(name, False, {"seconds": round(time.perf_counter() - t0, 4)}, errors[-1])
    emit("check", ok, {"elapsed_s": round(elapsed, 4), **summary}, "; ".join(errors))
    return 0 if ok else 1


IDENTITY = env.DIAGNOSTICS_IDENTITY


def protect() -> None:
    """prctl(PR_SET_DUMPABLE, 0) (Linux; best effort)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def serve() -> int:
    """`--serve`: import torch and the checks now, then run the one order the agent writes on stdin (a JSON line:
    `argv`, the arguments above, and `env`, the run's identity). A warm child of the agent (collector.control.warmdiag)."""
    import json

    import torch  # noqa: F401  the import a cold run pays when its command comes

    from vigil.recovery.diagnostics import checks  # noqa: F401

    line = sys.stdin.readline()
    if not line:
        return 0  # the agent let it go unused
    order = json.loads(line)
    os.environ.update({k: str(v) for k, v in dict(order["env"]).items() if k in IDENTITY})  # nothing else
    return main([str(a) for a in order["argv"]])


if __name__ == "__main__":
    protect()
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main())
