"""The demo's terminal narration of a resumed job's data re-split (pure)."""

from __future__ import annotations

import pytest

from vigil.app.demo.run import TORCH_JOB, narrate
from vigil.contract import DataSegment, JobRegistered

pytestmark = pytest.mark.pure


def job(data: DataSegment | None, job_id: str = TORCH_JOB) -> JobRegistered:
    return JobRegistered(job_id=job_id, host="demo-host-0", world_size=4, dp=4, data=data)


def test_a_resumed_start_tells_how_many_samples_were_re_split_and_that_none_were_lost_or_repeated() -> None:
    seg = DataSegment(epoch=0, ranks=4, samples_left=1_047_424, samples_done=1_152, in_flight=6, exact=True)
    assert narrate(job(seg)) == ("Recovery    data: 1047424 samples of epoch 0 re-split over 4 ranks (1152 read "
                                 "before, 6 shards part-way): none lost or repeated")
    broken = narrate(job(seg.model_copy(update={"exact": False})))
    assert broken is not None and broken.endswith("NOT exactly once: samples lost or repeated")


def test_a_fresh_start_another_job_or_no_data_say_nothing() -> None:
    fresh = DataSegment(epoch=0, ranks=6, samples_left=1 << 20, samples_done=0, exact=True)
    assert narrate(job(fresh)) is None and narrate(job(None)) is None
    assert narrate(job(fresh.model_copy(update={"samples_done": 5}), job_id="other")) is None


def test_a_kernel_xid_is_told_with_its_source_and_catalog_action() -> None:
    from vigil.contract import LogLine
    from vigil.contract.xid import XidAction

    xid = LogLine(job_id=TORCH_JOB, host="demo-host-0", category="xid", severity="critical", xid=79, source="kernel",
                  action=XidAction.REBOOT_THEN_CHECK, gpu_index=0,
                  message="NVRM: Xid (PCI:0000:3b:00): 79, pid=42, name=python, GPU has fallen off the bus.")
    assert narrate(xid) == ("Hardware  demo-host-0 GPU 0: Xid 79 [source kernel, catalog action reboot_then_check] "
                            "NVRM: Xid (PCI:0000:3b:00): 79, pid=42, name=python, GPU has fallen off the bus.")
    assert narrate(xid.model_copy(update={"source": "process", "action": None})) is None  # a printed claim
    assert narrate(xid.model_copy(update={"job_id": "other"})) is None
