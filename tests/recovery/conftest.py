"""The live recovery tests' fixture: `live`, a recovery setup (live.py) on the test's topics, torn down after it.

A test marked `@pytest.mark.recovery_env({...})` gives the controller those extra environment variables."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import Live
from tests.support.slurm_cluster import SlurmCluster, Unavailable
from vigil.settings import VigilSettings


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    marker = request.node.get_closest_marker("recovery_env")
    setup = Live(settings=topics, bootstrap=broker_bootstrap, tmp=tmp_path,
                 recovery_env=dict(marker.args[0]) if marker else {})
    try:
        yield setup
    finally:
        setup.close()


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
