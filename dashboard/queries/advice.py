"""The resource advisor's latest recorded advice of a job (`advice_events`, written by the analyzer's ingest).

The dashboard shows what `vigil advise --publish` recorded (it does not import the analyzer, so it
does not compute advice itself): the recommended node count against the current one, the curve,
hot and starved hosts, the data loader's share, the reasons, and the score of the advice before it.
"""

from __future__ import annotations

import json
from typing import Any

from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import ADVICE_EVENTS as A


def latest(store: Store, job: str) -> Row | None:
    """The newest advice of `job` with its curve and previous score decoded; None when none was recorded."""
    row = store.one("advice", f"""
        SELECT advice_id, ts, nodes, current, predicted, still_scaling, curve, hot, starved, data_share, reasons,
               scored
        FROM {A} FINAL WHERE verified = 1 AND job_id = {{job:String}} ORDER BY ts DESC, advice_id LIMIT 1""", {"job": job})
    if row is None:
        return None
    row["curve"] = _json(row["curve"], [])
    row["scored"] = _json(row["scored"], None)
    return row


def _json(text: Any, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default
