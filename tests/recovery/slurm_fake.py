"""An in-memory Slurm for the backend's unit tests: `scontrol`, `sinfo`, `squeue` argv in, their text out.

It speaks the formats the real tools print (`scontrol show node -o` with its `[user@time]` mark,
`sinfo -h -N -o FORMAT` by the format's fields) on a table of nodes, records every call, and can
be told to time out or fail the next calls, so the backend's pure logic is tested without Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vigil.recovery.backends.slurm.cli import CliTimeout
from vigil.recovery.errors import BackendError

AT = "2026-12-07T15:22:35"


@dataclass
class FakeNode:
    state: str = "IDLE"
    drain: bool = False
    reason: str = ""
    user: str = "root"


@dataclass
class FakeSlurm:
    nodes: dict[str, FakeNode] = field(default_factory=lambda: {f"n{i}": FakeNode() for i in (1, 2, 3)})
    jobs: dict[str, str] = field(default_factory=dict)  # id -> state
    comments: dict[str, str] = field(default_factory=dict)  # id -> its --comment
    names: dict[str, str] = field(default_factory=dict)  # id -> its job name
    others: set[str] = field(default_factory=set)  # ids of jobs another user submitted (`squeue --me` hides them)
    submitted: list[list[str]] = field(default_factory=list)  # every sbatch argv that made a job
    lose_answer: int = 0  # the next sbatch calls submit, then time out (the answer lost)
    calls: list[list[str]] = field(default_factory=list)
    fail: list[BackendError] = field(default_factory=list)  # raised by the next calls, in order

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        self.calls.append(list(argv))
        if self.fail:
            raise self.fail.pop(0)
        tool, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        if tool == "sinfo":
            return "".join(f"{n}|{self._long(x)}|{AT if x.reason else 'Unknown'}|{x.user if x.reason else 'Unknown'}|"
                           f"{x.reason or 'none'}\n" for n, x in self.nodes.items())
        if tool == "sbatch":
            return self._sbatch(args, argv)
        if tool == "squeue" and "-n" in args:
            name = args[args.index("-n") + 1]
            return "".join(f"{j}\n" for j, n in self.names.items() if n == name and self.jobs.get(j) in ("PENDING", "RUNNING"))
        if tool == "squeue" and "-j" not in args:
            mine = [j for j in self.jobs if "--me" not in args or j not in self.others]
            return "".join(f"{j}|{self.comments.get(j, '(null)')}\n" for j in mine)
        if tool == "squeue":
            job = args[args.index("-j") + 1]
            if job not in self.jobs:
                raise BackendError("slurm backend: squeue -h -j: exit 1: slurm_load_jobs error: Invalid job id specified")
            return self.jobs[job] + "\n"
        if args[:3] == ["show", "node", "-o"]:
            return "".join(self._show(n) for n in (args[3:] or list(self.nodes)))
        if args[:1] == ["update"]:
            return self._update(dict(a.split("=", 1) for a in args[1:]))
        raise BackendError(f"fake slurm: {argv} not understood")

    def _sbatch(self, args: list[str], argv: list[str]) -> str:
        if "--no-requeue" not in args or not args[-1].endswith(".sh"):
            raise BackendError(f"fake slurm: sbatch {args} not understood")
        new = str(1000 + len(self.submitted))
        self.submitted.append(list(argv))
        self.jobs[new] = "PENDING"
        self.names[new] = args[-1].rsplit("/", 1)[-1]
        self.comments[new] = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), "")
        if self.lose_answer:
            self.lose_answer -= 1
            raise CliTimeout("slurm backend: sbatch --no-requeue -N: no answer within 10s")
        return f"{new}\n" if "--parsable" in args else f"Submitted batch job {new}\n"

    def timeout_next(self, n: int = 1) -> None:
        self.fail.extend(CliTimeout("slurm backend: sinfo -h -N: no answer within 10s") for _ in range(n))

    def _long(self, x: FakeNode) -> str:
        if x.drain:
            return "drained" if x.state == "IDLE" else "draining"
        return x.state.lower()

    def _show(self, name: str) -> str:
        if name not in self.nodes:
            raise BackendError(f"slurm backend: scontrol show node: exit 1: Node {name} not found")
        x = self.nodes[name]
        state = x.state + ("+DRAIN" if x.drain else "")
        reason = f" Reason={x.reason} [{x.user}@{AT}]" if x.reason else ""
        return (f"NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 NodeAddr=127.0.0.1 "
                f"OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC State={state} ThreadsPerCore=1 Partitions=main{reason}\n")

    def _update(self, kv: dict[str, str]) -> str:
        x = self.nodes[kv["nodename"]]
        if kv.get("state") == "drain":
            if "reason" not in kv:
                raise BackendError("slurm backend: scontrol update: exit 1: You must specify a reason")
            x.drain, x.reason, x.user = True, kv["reason"], "root"
        elif kv.get("state") == "resume":
            x.drain, x.reason = False, ""
        return ""
