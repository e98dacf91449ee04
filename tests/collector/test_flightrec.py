"""Flight Recorder dumps from a real gloo process group (JSON and pickle) -> CollectiveTrace."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from vigil.collector.flightrec import FlightRecorderWatcher, parse_dump

pytestmark = pytest.mark.pure

DUMPER = """
import json, os, pickle, sys, time, torch, torch.distributed as dist
from vigil.kafka.broker import free_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(8)
for _ in range(3):
    dist.all_reduce(t)
# the recorder marks a collective completed from its own thread: keep the two dumps once both show the third
deadline = time.monotonic() + 60
while True:
    raw = torch._C._distributed_c10d._dump_fr_trace(True, False)
    text = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
    done = [int(d["pg_status"]["0"]["last_completed_collective"]) for d in (pickle.loads(raw), json.loads(text))]
    if min(done) >= 3:
        break
    if time.monotonic() > deadline:
        sys.exit(f"the recorder marked {done} (pickle, json) of 3 collectives completed in 60 s")
    time.sleep(0.01)
out = sys.argv[1]
open(out + "/nccl_trace_rank_0", "wb").write(raw)
open(out + "/trace_json_rank_5.json", "wb").write(text)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fr")
    subprocess.run([sys.executable, "-c", DUMPER, str(out)], check=True, timeout=120,
                   env={"TORCH_FR_BUFFER_SIZE": "100", "PATH": "/usr/bin:/bin"})
    return out


def test_real_dumps_become_traces(dumps: Path) -> None:
    watcher = FlightRecorderWatcher(dirs=[(dumps, "")], job_id="j", host="h")
    assert watcher.scan() == []  # first sight: wait until the file holds still
    traces = {t.rank: t for t in watcher.scan()}
    assert set(traces) == {0, 5} and watcher.malformed == 0
    for trace in traces.values():
        ops = [e for e in trace.entries if e.profiling_name == "gloo:all_reduce"]
        assert len(ops) == 3
        assert [e.collective_seq_id for e in ops] == sorted(e.collective_seq_id for e in ops)
        assert trace.process_groups == {"0": "default_pg"}
        assert trace.last_completed_seq["0"] >= 3 and trace.last_started_seq["0"] == -1  # gloo: never "started"
        assert trace.dumped_at is not None
    assert watcher.scan() == []  # shipped once


def test_pickles_with_classes_are_refused(tmp_path: Path) -> None:
    evil = pickle.dumps({"entries": [], "x": Path("/etc/passwd")})
    with pytest.raises(ValueError, match="refused"):
        parse_dump(evil)
    with pytest.raises(ValueError):
        parse_dump(b"{not json")
    (tmp_path / "dump_rank_1").write_bytes(evil)
    watcher = FlightRecorderWatcher(dirs=[(tmp_path, "dump_rank_")], job_id="j", host="h")
    assert watcher.scan() == [] and watcher.scan() == []
    assert watcher.malformed == 1
