"""A fresh Slurm job for a job whose allocation is gone: `sbatch --no-requeue`, never a requeue.

`Relaunch` is what `SlurmBackend` does for the controller's `relaunch` step (`base.Relauncher`):

* `gone(job_id)` — the allocation of a vigil job when `squeue` says it no longer runs: for a job
  `slurm-<id>` (what `vigil run` under `srun` names it) that Slurm job; for any other name (the
  recipe's `VIGIL_JOB_ID=$SLURM_JOB_NAME`) every Slurm job of that name (none pending or running:
  gone). None while it runs, when no script is configured for the job (`relaunch_scripts[job]`,
  else `relaunch_script` for a `slurm-<id>` job), or when `squeue` did not answer (unknown is never "gone": fail safe,
  nothing is submitted). One `squeue` per job per `read_interval_s`.
* `submit(...)` — `sbatch --no-requeue -N MIN-MAX --exclude=<nodes> --parsable --comment=<tag>
  SCRIPT`: a new job id (a requeue would keep the failed job's id and may hand back its node);
  the excluded hosts are named as Slurm nodes (`node_map`). A timeout is a `CliTimeout`: whether
  Slurm took the job is then unknown, and the caller asks `find(tag)` instead of submitting again.
* `find(tag)` — the job submitted with that comment, if slurmctld still knows it (`squeue`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from vigil.recovery.backends.slurm.allocation import Allocation, relaunch_argv, running, slurm_job_of
from vigil.recovery.backends.slurm.cli import SlurmCli
from vigil.recovery.backends.slurm.settings import SlurmSettings
from vigil.recovery.errors import BackendError

MAX_TAG = 64


class Relaunch:
    def __init__(self, settings: SlurmSettings, cli: SlurmCli, clock: Callable[[], float]) -> None:
        self.settings, self._cli, self._clock = settings, cli, clock
        self._seen: dict[str, tuple[float, bool]] = {}  # slurm job -> (read at, running)

    def script(self, job_id: str) -> str:
        """A named job's own script; `relaunch_script` only for `slurm-<id>` jobs (a name is never guessed)."""
        default = self.settings.relaunch_script if slurm_job_of(job_id) else ""
        return self.settings.relaunch_scripts.get(job_id, default)

    def gone(self, job_id: str) -> str | None:
        if not self.script(job_id):
            return None
        slurm_id = slurm_job_of(job_id)
        now = self._clock()
        at, alive = self._seen.get(job_id, (-math.inf, True))
        if now - at >= self.settings.read_interval_s:
            try:
                alive = running(self._cli, self.settings, slurm_id) if slurm_id else self._named(job_id)
            except BackendError:
                return None  # unknown: keep waiting, never submit on a guess
            if len(self._seen) > 1024:
                self._seen.clear()
            self._seen[job_id] = (now, alive)
        return None if alive else (slurm_id or f"name={job_id}")

    def _named(self, name: str) -> bool:
        """Whether a Slurm job named `name` is pending or running (a fresh one submitted already counts)."""
        out = self._cli.run([self.settings.squeue, "-h", "-n", name, "-t", "PD,R,CF,CG,S", "-o", "%i"],
                            timeout_s=self.settings.command_timeout_s)
        return any(line.strip() for line in out.splitlines())

    def submit(self, job_id: str, *, exclude: Iterable[str], nodes_min: int, nodes_max: int,
               tag: str) -> tuple[str, list[str]]:
        """(the new Slurm job id, the argv that submitted it)."""
        if not tag or len(tag) > MAX_TAG or not tag.replace("-", "").replace(":", "").isalnum():
            raise ValueError(f"relaunch tag {tag!r}: 1..{MAX_TAG} letters, digits, '-' or ':'")
        nodes = {self.settings.node_map.get(h, h) for h in exclude}
        argv = relaunch_argv(Allocation(job_id="", nodes=(), host=""), alive=False, exclude=nodes,
                             nodes_min=nodes_min, nodes_max=nodes_max, command=[], script=self.script(job_id),
                             sbatch=self.settings.sbatch, options=["--parsable", f"--comment={tag}"])
        assert argv is not None
        out = self._cli.run(argv, timeout_s=self.settings.command_timeout_s).strip()
        new = out.split(";", 1)[0].strip()  # --parsable: "<id>" or "<id>;<cluster>"
        if not new.isdigit():
            raise BackendError(f"slurm backend: sbatch answered {out[:200]!r}, not a job id")
        return new, argv

    def find(self, tag: str) -> str | None:
        # only this user's jobs (the controller submitted it): another user's job carrying the tag is not ours
        out = self._cli.run([self.settings.squeue, "-h", "--me", "-a", "-t", "all", "-o", "%i|%k"],
                            timeout_s=self.settings.command_timeout_s)
        for line in out.splitlines():
            job, _, comment = line.strip().partition("|")
            if comment == tag and job.isdigit():
                return job
        return None
