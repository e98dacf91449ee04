"""The live recovery tests' fixture: `live`, a recovery setup (live.py) on the test's topics, torn down after it.

A test marked `@pytest.mark.recovery_env({...})` gives the controller those extra environment variables; one marked
`@pytest.mark.recovery_run_as("nobody")` has its agents start the training processes as that user (`vigil run
--user`) in a folder that user may enter, and is skipped, saying why, where the machine does not allow it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import PY, Live, interpreter_for
from tests.support.slurm_cluster import SlurmCluster, Unavailable
from vigil.settings import VigilSettings


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    marker = request.node.get_closest_marker("recovery_env")
    user_marker = request.node.get_closest_marker("recovery_run_as")
    run_as = str(user_marker.args[0]) if user_marker else ""
    tmp, python = tmp_path, PY
    if run_as:
        python, why = interpreter_for(run_as)
        if why:
            pytest.skip(f"training processes as {run_as}: {why}")
        tmp = Path(tempfile.mkdtemp(prefix="vigil-runas-"))  # pytest's tmp_path is root's only: the job could not
        tmp.chmod(0o755)  # enter its own spool; its agent's keys under it stay 0600
    setup = Live(settings=topics, bootstrap=broker_bootstrap, tmp=tmp,
                 recovery_env=dict(marker.args[0]) if marker else {}, run_as=run_as, python=python)
    try:
        yield setup
    finally:
        setup.close()
        if tmp != tmp_path:
            shutil.rmtree(tmp, ignore_errors=True)


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
