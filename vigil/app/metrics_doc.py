"""docs/metrics.md from the code: every service's declared metric families (`python -m vigil.app.metrics_doc`).

The application layer is where the components meet, so the page is assembled here; tests/metrics
fails when the committed page differs from `page()`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vigil.analyzer.metrics import AnalyzerMetrics
from vigil.metrics import Metrics, MetricsSettings
from vigil.metrics.catalog import render
from vigil.recovery.controller.metrics import RecoveryMetrics

PAGE = Path("docs/metrics.md")


def services() -> list[Metrics]:
    """A fresh instance of each service's metrics (their own registries: nothing is served)."""
    settings = MetricsSettings.model_construct(**{k: f.default for k, f in MetricsSettings.model_fields.items()})
    return [AnalyzerMetrics(settings), RecoveryMetrics(settings)]


def page() -> str:
    return render(services())


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else PAGE
    path.write_text(page())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
