"""The relaunch harness: the recovery engine on a simulated fleet training as a Slurm job, its allocation ended.

Shared by test_relaunch (an in-memory Slurm) and test_slurm_live (a real slurmctld): `harness` builds the engine
with a Slurm backend, `allocation_ends` fails n2 and ends the batch job, `outcomes` reads a case's outcomes.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.recovery.slurm_fake import FakeSlurm
from tests.support.fleet import DyingEffects, Fleet, Harness, incident
from vigil.contract import Event, Outcome
from vigil.recovery.backends.slurm import SlurmBackend, SlurmCli, SlurmSettings
from vigil.recovery.controller.effects import MemoryEffects
from vigil.recovery.controller.engine import Engine
from vigil.recovery.controller.state import ClusterState
from vigil.recovery.settings import RecoverySettings

JOB = "slurm-42"


def harness(cli: SlurmCli | None, *, script: str = "/opt/jobs/train.sh", job: str = JOB, conf: str = "",
            die_after: Callable[[Event], bool] | None = None) -> Harness:
    """The engine on a simulated fleet training as `job` on n1..n3, its backend Slurm through `cli` (None: the real
    tools)."""
    rs = RecoverySettings(policy_settle_s=0, form_wait_s=0, policy_scale_up=False)
    backend = SlurmBackend(SlurmSettings(read_interval_s=0, relaunch_script=script, conf=conf), cli=cli)
    fx = MemoryEffects(backend=backend) if die_after is None else DyingEffects(backend=backend, die_after=die_after)
    fleet = Fleet(job=job, hosts=["n1", "n2", "n3"])
    h = Harness(fleet=fleet, engine=Engine(state=ClusterState(), settings=rs, fx=fx), fx=fx)
    h.feed(fleet.announce(h.now))
    h.run(lambda: h.training(1))
    for _ in range(3):
        h.turn()
    return h


def allocation_ends(h: Harness, fake: FakeSlurm | None) -> str:
    """n2 fails (an Xid names it), then the batch job is gone and its agents with it; the case's id."""
    h.feed(h.fleet.commit(10, h.now) + h.fleet.crash("n2", h.now))
    inc = incident(h.fleet.job, "n2", at=h.now, strong=True)
    h.feed([inc])
    if fake is not None:
        del fake.jobs["42"]
    h.feed([h.fleet.member(n, "left", h.now) for n in h.fleet.hosts])
    h.fleet.hosts = []  # nobody answers any more
    return inc.incident_id


def outcomes(h: Harness, case: str) -> list[Outcome]:
    return [e for e in h.fx.events if isinstance(e, Outcome) and e.incident_id == case]
