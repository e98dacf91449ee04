"""The agent's diagnostics never import from the job's working directory (attacker's review: under `vigil run
--user`, a job that plants `argparse.py` where the agent was started must not run code as the agent)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vigil.collector.control.diagnose import diagnostics_argv
from vigil.collector.control.warmdiag import SAFE_CWD, SERVE
from vigil.contract.control import DiagnoseParams

pytestmark = pytest.mark.pure


def test_a_module_planted_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    (tmp_path / "argparse.py").write_text("raise SystemExit('PLANTED CODE RAN')\n")
    argv = [*diagnostics_argv(DiagnoseParams(group=["h1"], rank=0, master_addr="127.0.0.1", master_port=1)), "--help"]
    assert argv[:len(SERVE) - 1] == SERVE[:-1]  # the warm child starts the same interpreter the same way
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    assert "PLANTED" not in done.stdout + done.stderr and done.returncode == 0, done.stderr[-500:]
    assert SAFE_CWD == "/"
