"""The rendezvous options vigil fills into a torchrun command line, and the node range."""

from __future__ import annotations

import pytest

from vigil.collector.control.rendezvous import NodeRange, fill, rendezvous_env
from vigil.collector.control.torchrun import FLAGS, scan
from vigil.contract import World

pytestmark = pytest.mark.pure

WORLD = World(generation=3, hosts=["h0", "h1"], node_rank=1, master_addr="10.0.0.1", master_port=29511)


def test_torchrun_options_are_replaced_by_the_worlds() -> None:
    argv = ["torchrun", "--nnodes", "3", "--node_rank=2", "--nproc-per-node", "2", "--master-addr", "x",
            "--master-port=1", "--max-restarts", "3", "--standalone", "-t3", "train.py", "--nnodes", "7"]
    assert fill(argv, WORLD) == [
        "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29511",
        "--max-restarts", "0", "--nproc-per-node", "2", "-t3", "train.py", "--nnodes", "7"]  # the script's own kept


def test_python_m_torch_distributed_run_and_rdzv_options() -> None:
    argv = ["python", "-u", "-m", "torch.distributed.run", "--rdzv-backend", "c10d", "--rdzv_endpoint=h:1",
            "--rdzv-id", "j", "-m", "mypkg.train", "--lr", "1"]
    assert fill(argv, WORLD) == [
        "python", "-u", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1", "--master-addr",
        "10.0.0.1", "--master-port", "29511", "--max-restarts", "0", "-m", "mypkg.train", "--lr", "1"]


def test_a_command_that_is_not_torchrun_is_left_alone_and_gets_the_env() -> None:
    assert scan(["python", "train.py"]) is None
    assert fill(["python", "train.py"], WORLD) == ["python", "train.py"]
    env = rendezvous_env(WORLD)
    assert env["VIGIL_NODE_RANK"] == "1" and env["VIGIL_NNODES"] == "2" and env["VIGIL_HOSTS"] == "h0,h1"
    assert "VIGIL_RESTORE_MAX_STEP" not in env
    assert rendezvous_env(WORLD.model_copy(update={"restore_max_step": 27}))["VIGIL_RESTORE_MAX_STEP"] == "27"


def test_flags_match_torchruns_own_parser() -> None:
    from torch.distributed.run import get_args_parser

    no_value = {s for a in get_args_parser()._actions if a.nargs == 0 for s in a.option_strings}
    assert no_value == FLAGS


@pytest.mark.parametrize(("text", "multiple", "expected"), [
    ("2:3", 1, NodeRange(min=2, max=3)), ("4", 2, NodeRange(min=4, max=4, multiple=2)),
])
def test_node_range(text: str, multiple: int, expected: NodeRange) -> None:
    assert NodeRange.parse(text, multiple) == expected


@pytest.mark.parametrize(("text", "multiple", "message"), [
    ("3:2", 1, "MIN <= MAX"), ("a:b", 1, "expected MIN:MAX"), ("2:4", 5, "--node-multiple"), ("0:2", 1, "1 <= MIN"),
])
def test_bad_node_ranges_name_the_option(text: str, multiple: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NodeRange.parse(text, multiple)
