"""The Slurm command-line tools behind one tiny Protocol: `SlurmCli.run(argv, timeout_s) -> stdout`.

`SubprocessCli` runs them (with `SLURM_CONF` when configured); tests use an in-memory fake that
speaks the same output formats (tests/recovery/slurm_fake.py). Failures are `BackendError`s with
one line: the command, its exit status and Slurm's own message; a call past its bound is a
`CliTimeout` (also a `BackendError`), which readers answer with the last known state.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Protocol

from vigil.errors import one_line
from vigil.recovery.errors import BackendError, BackendTimeout


class CliTimeout(BackendTimeout):
    """A Slurm command did not answer within its bound (slurmctld busy or unreachable)."""


class SlurmCli(Protocol):
    def run(self, argv: list[str], *, timeout_s: float) -> str:
        """Run one Slurm command; its stdout, or `BackendError` / `CliTimeout`."""
        ...


@dataclass(frozen=True)
class SubprocessCli:
    conf: str = ""  # slurm.conf path (SLURM_CONF); empty: the tools' own default

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        what = " ".join(argv[:3])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CliTimeout(f"slurm backend: {what}: no answer within {timeout_s:g}s") from None
        except OSError as exc:
            raise BackendError(f"slurm backend: {what}: cannot run: {one_line(exc)}") from None
        if done.returncode != 0:
            message = one_line(Exception((done.stderr or done.stdout).strip() or "(no message)"), limit=500)
            raise BackendError(f"slurm backend: {what}: exit {done.returncode}: {message}")
        return done.stdout
