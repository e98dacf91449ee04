"""The live recovery tests' fixture: `live`, a recovery setup (live.py) on the test's topics, torn down after it.

A test marked `@pytest.mark.recovery_env({...})` gives the controller those extra environment variables.

The training processes run as `nobody` (`vigil run --user`: the agents root, each with its own host key) in a
folder that user may enter, wherever the machine allows it (the tests run as root and `interpreter_for` finds an
interpreter `nobody` can run the job with); elsewhere they run as the agents' own user, as the session says once
(a warning naming why). A test marked `@pytest.mark.recovery_run_as("nobody")` needs that user: it is skipped,
saying why, where the machine does not allow it; one marked `@pytest.mark.recovery_run_as("", reason=...)` keeps
the agents' own user, for the reason it states."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import PY, Live, interpreter_for
from tests.support.slurm_cluster import SlurmCluster, Unavailable
from vigil.settings import VigilSettings

RUN_AS = "nobody"
"""The training processes' user of every live recovery test that can have it (its agents stay root's)."""


@pytest.fixture(scope="session")
def default_run_as() -> tuple[str, str]:
    """(`RUN_AS`, its interpreter) where the machine allows it; else ("", this interpreter), said once."""
    python, why = interpreter_for(RUN_AS)
    if why:
        warnings.warn(f"live recovery tests: the training processes run as the agents' own user, not as {RUN_AS} "
                      f"(vigil run --user): {why}", stacklevel=1)
        return "", PY
    return RUN_AS, python


def _run_as(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The test's training user and its interpreter ("" and this one: the agents' own user)."""
    marker = request.node.get_closest_marker("recovery_run_as")
    if marker is None:
        default: tuple[str, str] = request.getfixturevalue("default_run_as")
        return default
    user = str(marker.args[0])
    if not user:
        assert marker.kwargs.get("reason"), "recovery_run_as(\"\") states why the test keeps the agents' user"
        return "", PY
    python, why = interpreter_for(user)
    if why:
        pytest.skip(f"training processes as {user}: {why}")
    return user, python


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    marker = request.node.get_closest_marker("recovery_env")
    run_as, python = _run_as(request)
    tmp, settings = tmp_path, topics
    if run_as:
        tmp = Path(tempfile.mkdtemp(prefix="vigil-runas-"))  # pytest's tmp_path is root's only: the job could not
        tmp.chmod(0o755)  # enter its own spool; its agent's keys under it stay 0600
        settings = topics.model_copy(update={"home": tmp / "home"})  # the test reads with the processes' key set
    setup = Live(settings=settings, bootstrap=broker_bootstrap, tmp=tmp,
                 recovery_env=dict(marker.args[0]) if marker else {}, run_as=run_as, python=python)
    try:
        yield setup
        if run_as:  # the step records the job wrote are that user's: it did train as run_as
            assert setup.trained_as() == {run_as}, f"training processes not (only) {run_as}'s: {setup.trained_as()}"
    finally:
        setup.close()
        if tmp != tmp_path:
            for log in tmp.glob("*.log"):  # the processes' logs stay with pytest's kept folders
                shutil.copy(log, tmp_path)
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
