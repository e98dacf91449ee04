"""deploy/slurm/: the sbatch recipe and the prolog are valid bash and keep the rules the README states."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
pytestmark = pytest.mark.pure


@pytest.mark.parametrize("name", ["vigil.sbatch", "prolog.sh"])
def test_scripts_parse(name: str) -> None:
    done = subprocess.run(["bash", "-n", str(DEPLOY / name)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_sbatch_recipe_runs_one_agent_per_node_and_never_requeues() -> None:
    text = (DEPLOY / "vigil.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?", text, re.M))
    assert "no-requeue" in directives and directives["ntasks-per-node"] == "1"
    lo, hi = directives["nodes"].split("-")
    assert re.search(rf'NODES="\$\{{VIGIL_NODES:-{lo}:{hi}\}}"', text)  # vigil's MIN:MAX equals Slurm's MIN-MAX
    assert re.search(r'srun --kill-on-bad-exit=0 --ntasks-per-node=1 \\\n\s+vigil run --nodes "\$NODES" -- ', text)


def test_prolog_drains_with_vigils_reason_only_when_diagnostics_fail(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    stub = tmp_path / "scontrol"
    stub.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" >> {calls}\n')
    stub.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "VIGIL_PYTHON": sys.executable, "VIGIL_SCONTROL": str(stub),
           "SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "77"}
    ok = subprocess.run(["bash", str(DEPLOY / "prolog.sh")], capture_output=True, text=True, check=False,
                        env={**env, "VIGIL_PROLOG_ARGS": "--checks gemm --gemm-size 32 --gemm-iters 2"})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert '"test":"gemm"' in ok.stdout and not calls.exists()
    bad = subprocess.run(["bash", str(DEPLOY / "prolog.sh")], capture_output=True, text=True, check=False,
                         env={**env, "VIGIL_PROLOG_ARGS": "--checks gemm --gemm-size 256 --gemm-iters 20 --timeout 1e-9"})
    assert bad.returncode == 1 and '"ok":false' in bad.stdout
    assert calls.read_text().splitlines() == ["update", "nodename=n7", "state=drain",
                                              "reason=vigil: prolog-77 diagnostics failed (gemm) on n7"]
