"""The live recovery tests' fixtures: `live`, a recovery setup on the test's topics, torn down after it (defined in
tests/support/live.py, shared with tests/security), and a real Slurm (`slurm`).

Here the training processes run as `nobody` (`vigil run --user`: the agents root, each with its own host key) in a
folder that user may enter, wherever the machine allows it (the tests run as root and `interpreter_for` finds an
interpreter `nobody` can run the job with); elsewhere as the agents' own user, as the session says once (a warning
naming why). A test marked `@pytest.mark.recovery_run_as("nobody")` needs that user: it is skipped, saying why,
where the machine does not allow it; one marked `@pytest.mark.recovery_run_as("", reason=...)` keeps the agents'
own user, for the reason it states."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.live import live, nobody_where_allowed
from tests.support.slurm_cluster import SlurmCluster, Unavailable

__all__ = ["live", "live_default_user", "slurm", "slurm_session"]


@pytest.fixture(scope="session")
def live_default_user() -> tuple[str, str]:
    """Every live recovery test's training runs as nobody where the machine allows it."""
    return nobody_where_allowed()


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
