"""Per-GPU quarantine on the node (issue 49): the local registry's GPU list, and the devices a generation gets.

Pure: `CordonRegistry.quarantine/release` keep the host's cordon and the GPU list apart in one file;
`collector.control.gpus.devices` leaves quarantined GPUs out of `CUDA_VISIBLE_DEVICES` (PCI bus order), lowers
torchrun's `--nproc-per-node` when fewer GPUs are left than workers, and refuses when none is left. The real
agent's use of it is asserted in tests/recovery/test_xid_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vigil.collector.control.gpus import devices, host_gpus, with_nproc
from vigil.collector.control.torchrun import nproc_per_node
from vigil.cordons import CordonRegistry, RegistryError

pytestmark = pytest.mark.pure
TORCHRUN = ["torchrun", "--nproc-per-node", "4", "--tee", "3", "train.py", "--nproc-per-node", "9"]


def test_the_registry_keeps_quarantined_gpus_beside_cordons(tmp_path: Path) -> None:
    reg = CordonRegistry(tmp_path / "cordons.json")
    entry, added = reg.quarantine("h1", (3, 1), reason="Xid 48", incident_id="i1", by="controller")
    assert added and entry.gpus == (1, 3)
    assert reg.quarantine("h1", (1,), reason="again")[1] is False  # idempotent
    assert reg.quarantine("h1", (5,), reason="Xid 94")[0].gpus == (1, 3, 5)  # a union
    reg.add("h2", reason="Xid 79")
    assert set(reg.read()) == {"h2"} and {h: q.gpus for h, q in reg.quarantined().items()} == {"h1": (1, 3, 5)}
    assert reg.remove("h2") is not None and reg.quarantined()["h1"].gpus == (1, 3, 5)  # a cordon's removal keeps them
    held = reg.release("h1")
    assert held is not None and held.gpus == (1, 3, 5) and reg.quarantined() == {} and reg.release("h1") is None


def test_a_registry_with_bad_gpu_indices_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cordons.json"
    path.write_text(json.dumps({"hosts": {}, "gpus": {"h1": {"gpus": ["0; rm -rf /"]}}}))
    with pytest.raises(RegistryError, match="GPU indices"):
        CordonRegistry(path).quarantined()


def test_quarantined_gpus_are_left_out_of_the_visible_devices() -> None:
    got = devices(TORCHRUN, {}, quarantined={1}, known=[0, 1, 2, 3, 4, 5, 6, 7])
    assert not isinstance(got, str)
    assert got.env == {"CUDA_VISIBLE_DEVICES": "0,2,3,4,5,6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert got.argv == TORCHRUN and got.nproc == 4 and got.excluded == (1,)


def test_fewer_gpus_than_workers_lowers_torchruns_nproc_only() -> None:
    got = devices(TORCHRUN, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, quarantined={0, 2})
    assert not isinstance(got, str)
    assert got.env["CUDA_VISIBLE_DEVICES"] == "1,3" and got.nproc == 2
    assert got.argv == ["torchrun", "--nproc-per-node", "2", "--tee", "3", "train.py", "--nproc-per-node", "9"]
    assert nproc_per_node(got.argv) == 2  # the script's own option is left alone
    assert with_nproc(["torchrun", "train.py"], 3) == ["torchrun", "--nproc-per-node", "3", "train.py"]


def test_nothing_quarantined_changes_nothing_and_nothing_left_refuses() -> None:
    same = devices(TORCHRUN, {}, quarantined=set(), known=[0, 1])
    assert not isinstance(same, str) and same.argv == TORCHRUN and same.env == {}
    assert devices(["python", "train.py"], {}, quarantined={0}) == "every GPU of this host is quarantined (0)"
    # the host's GPUs: the agent's own list of indices, else what NVML/sysfs know, else one per local rank
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}, [0, 1], 1) == [2, 5]
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, [0, 1], 1) == [0, 1]
    assert host_gpus({}, [], 3) == [0, 1, 2]
