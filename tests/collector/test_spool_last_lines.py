"""What the training side writes just before its agent stops is shipped by the agent's last drain.

The spool's files are looked at (new files, their sizes) on a 0.5 s timer in the shipper's rounds;
`Agent.stop` must look once more before its drain, or lines written since the last timed look (the
last steps of a job that just ended, a rank's first file) stay unread when no agent follows.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.agent_harness import append_lines, step_line
from tests.support.waiting import wait_until
from vigil.collector.agent import Agent
from vigil.collector.settings import CollectorSettings, resolve_paths
from vigil.collector.sink import MemorySink


def test_lines_written_right_after_a_timed_scan_are_shipped_when_the_agent_stops(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    settings = CollectorSettings(host="h0", job_id="j", heartbeat_interval=3600, nic_interval=3600, poll_interval=0.05,
                                 sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none")
    sink = MemorySink()
    agent = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=sink, spool_roots=[spool])
    agent.start()
    first = step_line(job="j", host="h0", rank=0, step=1)
    append_lines(spool / "rank0.jsonl", [first])
    wait_until(lambda: first["event_id"] in {e.event_id for e in sink.events}, 30, "the first line to be shipped")
    looked = agent.spool.scanned_at
    wait_until(lambda: agent.spool.scanned_at > looked, 30, "the spool's next timed look", every=0.01)
    # within the 0.5 s before the next timed look: a line appended to a known file, and a new file
    late = [step_line(job="j", host="h0", rank=0, step=2), step_line(job="j", host="h0", rank=1, step=2)]
    append_lines(spool / "rank0.jsonl", late[:1])
    append_lines(spool / "rank1.jsonl", late[1:])
    assert agent.stop(drain_timeout_s=10)
    shipped = [e.event_id for e in sink.events]
    assert [d["event_id"] for d in late if d["event_id"] not in shipped] == []
    assert len(shipped) == len(set(shipped))
