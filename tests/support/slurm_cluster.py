"""A real Slurm on this machine for tests: munged, slurmctld and three slurmd (n1..n3) on 127.0.0.1.

Debian's slurm-wlm is built with multiple-slurmd, so one machine runs several `slurmd -N nX`,
each on its own port (`NodeName=nX NodeHostname=localhost Port=...`). Everything lives under one
temporary directory: munge's own key and socket, slurm.conf with free ports, state, spool, logs,
so nothing of the machine's Slurm or munge is touched. `SlurmCluster.start()` raises `Unavailable`
(the tests skip with its text) when the packages are missing, we are not root, or the daemons do
not bring every node to idle; `stop()` ends only the processes it started.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("n1", "n2", "n3")
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "srun", "sbatch", "scancel")


class Unavailable(Exception):
    """This machine cannot run the test cluster; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=self.root)  # a job's default output file (slurm-<id>.out) lands here
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def start(self, timeout: float = 60.0) -> None:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            raise Unavailable(f"slurm-wlm/munge not installed ({', '.join(missing)} missing; `make test` installs "
                              f"them as root)")
        if os.geteuid() != 0:
            raise Unavailable("the test cluster runs slurmd as root (SlurmUser=root): not root here")
        for d in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
        self._spawn("munged", "-F", "-f", f"--socket={self.root / 'munge/sock'}", f"--key-file={key}",
                    f"--log-file={self.root / 'munge/log'}", f"--pid-file={self.root / 'munge/pid'}",
                    f"--seed-file={self.root / 'munge/seed'}")
        self.conf.write_text(self._conf())
        self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
        for n in NODES:
            self._spawn("slurmd", "-D", "-N", n, "-f", str(self.conf))
        deadline = time.monotonic() + timeout
        while self.states() != dict.fromkeys(NODES, "idle"):
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{dead} exited" if dead else f"nodes not idle after {timeout:g}s: {self.states()}"
                raise Unavailable(f"the Slurm daemons did not come up ({why}); logs in {self.root / 'log'}: "
                                  + self._log_tail())
            time.sleep(0.2)

    def states(self) -> dict[str, str]:
        try:
            out = self.run("sinfo", "-h", "-N", "-o", "%N|%T", timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def reset(self) -> None:
        """Between tests: no jobs, every node resumed (whoever drained it)."""
        self.run("scancel", "--full", "-u", "root", check=False)
        for n in NODES:
            self.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
        self.wait_idle(60.0)

    def wait_idle(self, timeout: float) -> None:
        """Every node idle (a resumed node is `idle*` until slurmctld's next ping; a job submitted before it
        answers waits for the scheduler's next cycle)."""
        deadline = time.monotonic() + timeout
        while self.states() != dict.fromkeys(NODES, "idle"):
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes not idle after {timeout:g}s: {self.states()}")
            time.sleep(0.2)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _spawn(self, *argv: str) -> None:
        log = (self.root / "log" / f"{argv[0]}{'-' + argv[3] if argv[0] == 'slurmd' else ''}.out").open("wb")
        self.procs.append(subprocess.Popen(list(argv), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def _log_tail(self) -> str:
        lines: list[str] = []
        for f in sorted((self.root / "log").glob("*")):
            lines += [f"{f.name}: {line}" for line in f.read_text(errors="replace").splitlines()[-3:]]
        return " | ".join(lines)[-2000:]

    def _conf(self) -> str:
        r = self.root
        nodes = "\n".join(f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={_free_port()} CPUs=2 "
                          f"RealMemory=1000 State=UNKNOWN" for n in NODES)
        return f"""ClusterName=vigiltest
SlurmctldHost=localhost
SlurmctldPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r / 'munge/sock'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=bf_interval=1
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}/%n
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd'}-%n.pid
SlurmctldLogFile={r / 'log/slurmctld.log'}
SlurmdLogFile={r / 'log/slurmd'}-%n.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
{nodes}
PartitionName=main Nodes=n[1-{len(NODES)}] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
