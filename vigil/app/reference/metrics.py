"""docs/metrics.md from the code: every service's declared metric families (`python -m vigil.app.reference`).

The application layer is where the components meet, so the page is assembled here, and README.md's
list of names (`readme()`: its metrics block regenerated); tests/metrics fails when the committed page
differs from `page()` or README.md from `readme()`.
"""

from __future__ import annotations

from vigil.analyzer.metrics import AnalyzerMetrics
from vigil.metrics import Metrics, MetricsSettings
from vigil.metrics.catalog import render, spliced, summary
from vigil.notify.metrics import NotifyMetrics
from vigil.recovery.controller.metrics import RecoveryMetrics


def services() -> list[Metrics]:
    """A fresh instance of each service's metrics (their own registries: nothing is served)."""
    settings = MetricsSettings.model_construct(**{k: f.default for k, f in MetricsSettings.model_fields.items()})
    return [AnalyzerMetrics(settings), RecoveryMetrics(settings), NotifyMetrics(settings)]


def page() -> str:
    return render(services())


def readme(text: str) -> str:
    """README.md's `text` with its metrics block (the families' names per service) as the code has them now."""
    return spliced(text, summary(services()))
