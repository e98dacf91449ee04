"""deploy/prometheus: the rules and the scrape configuration pass promtool, the rules' unit tests pass, and every
metric the rules and the Grafana dashboard name is one a service declares (docs/metrics.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vigil.app.reference.metrics import services

pytestmark = pytest.mark.pure
HERE = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian's prometheus: "
                                    "`make test` installs it as root)")


@needs_promtool
@pytest.mark.parametrize("argv", [["check", "rules", "rules.yml"], ["test", "rules", "rules_test.yml"],
                                  ["check", "config", "prometheus.yml"]])
def test_promtool_accepts_the_deploy_files(argv: list[str]) -> None:
    assert PROMTOOL is not None
    out = subprocess.run([PROMTOOL, *argv], cwd=HERE, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_rules_and_dashboard_name_only_declared_metrics() -> None:
    declared = {f.name for m in services() for f in m.families}
    histograms = {f.name for m in services() for f in m.families if f.kind == "histogram"}
    dashboard = json.loads((HERE / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    text = "\n".join(exprs) + (HERE / "rules.yml").read_text()
    named = set(re.findall(r"\bvigil_[a-z0-9_]+", text))
    resolved = {re.sub(r"_(bucket|count|sum)$", "", n) if re.sub(r"_(bucket|count|sum)$", "", n) in histograms
                else n for n in named}
    assert resolved and resolved <= declared, resolved - declared
    assert {"vigil_ingest_behind_seconds", "vigil_detect_turn_seconds", "vigil_recovery_leading",
            "vigil_ingest_dead_letters_total"} <= resolved  # the four health alerts of issue 52
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
