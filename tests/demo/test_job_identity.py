"""`make demo` runs its job as a separate uid where the machine allows (`vigil.app.demo.principal`): as root, with
every path the job reads reachable by that uid; else the caller's uid and a note naming why (a venv under a 0700
directory: the directory)."""

from __future__ import annotations

import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vigil.app.demo.principal import JOB_USER, job_identity

pytestmark = pytest.mark.pure


@pytest.fixture
def tree() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp: every ancestor searchable by others (pytest's tmp is 0700)
    root.chmod(0o755)
    (root / "venv" / "lib").mkdir(parents=True)
    (root / "venv" / "lib" / "mod.py").write_text("x = 1\n")
    (root / "venv" / "lib" / "mod.py").chmod(0o644)
    yield root
    shutil.rmtree(root)


def test_not_root_runs_the_job_as_the_callers_uid_and_says_how(tree: Path) -> None:
    who = job_identity(euid=1000, reads=[tree / "venv"], platform="linux")
    assert who.user is None and "as root" in who.note
    assert job_identity(euid=0, reads=[tree / "venv"], platform="darwin").user is None


@pytest.mark.skipif(not hasattr(pwd, "getpwnam") or JOB_USER not in {p.pw_name for p in pwd.getpwall()},
                    reason="no 'nobody' user")
def test_as_root_a_readable_venv_gives_the_job_its_own_uid_and_a_closed_one_falls_back(tree: Path) -> None:
    reads = [tree / "venv", tree / "venv" / "lib" / "mod.py"]
    assert job_identity(euid=0, reads=reads, platform="linux").user == JOB_USER
    (tree / "venv").chmod(0o700)  # a venv under a 0700 directory (a home): the job could not import anything
    who = job_identity(euid=0, reads=reads, platform="linux")
    assert who.user is None and f"{tree / 'venv'} (mode 0700)" in who.note
    (tree / "venv").chmod(0o755)
    (tree / "venv" / "lib" / "mod.py").chmod(0o600)  # a file only its owner reads
    assert job_identity(euid=0, reads=reads, platform="linux").user is None
