"""What every page render gets: the store, settings, the URL selection, the resolved job and window."""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.queries.jobs import JobInfo, job_window
from vigil.dashboard.queries.window import Window
from vigil.dashboard.selection import Selection
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store


@dataclass(frozen=True, kw_only=True)
class PageView:
    store: Store
    settings: DashboardSettings
    sel: Selection
    jobs: list[JobInfo]
    job: JobInfo | None
    actions: bool = False  # the dashboard may act (a token and a publisher; see dashboard/actions.py)

    @property
    def window(self) -> Window | None:
        return None if self.job is None else job_window(self.job, self.sel.range_seconds)
