"""The live recovery tests' fixtures: `live`, a recovery setup on the test's topics, torn down after it (defined in
tests/support/live.py, shared with tests/security), and a real Slurm (`slurm`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.live import live
from tests.support.slurm_cluster import SlurmCluster, Unavailable

__all__ = ["live", "slurm", "slurm_session"]


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real Slurm (tests/support/slurm_cluster.py) for the session; the tests skip, saying why, when it cannot start."""
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (Unavailable, OSError, subprocess.SubprocessError) as exc:
        cluster.stop()
        pytest.skip(f"no Slurm test cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, every node resumed and no job left after the test."""
    try:
        yield slurm_session
    finally:
        slurm_session.reset()
