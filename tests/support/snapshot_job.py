"""The snapshot job under torchrun (tests/recovery/snap_worker.py) and the newest step its ranks completed."""

from __future__ import annotations

from datetime import datetime

from tests.support.live import HERE, PY, Live

STEPS, CRASH, HANG = 28, 15, 22


def torchrun(*args: str, standalone: bool = False, python: str = PY) -> list[str]:
    nproc = ["--standalone", "--nproc-per-node", "3"] if standalone else ["--nproc-per-node", "1"]
    return [python, "-m", "torch.distributed.run", *nproc, str(HERE / "snap_worker.py"), "--steps", str(STEPS), *args]


def completed_before(live: Live, job: str, until: datetime | None) -> int:
    """The newest step the job's ranks completed (not failed) before `until`, from their own step records."""
    from vigil.contract import StepTiming
    from vigil.contract.wire import decode_batch
    from vigil.kafka.reader import read_topics

    assert until is not None
    steps = [e.step for rec in read_topics(live.settings, live.bootstrap, [live.settings.topic("steps")])
             for e in decode_batch(rec.value).events
             if isinstance(e, StepTiming) and e.job_id == job and not e.failed and e.ts < until]
    return max(steps)
