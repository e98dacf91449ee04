"""A host's hardware fault history: what its hardware reported, and what the controller did about it.

The facts are the host's log lines whose source is the hardware's own report (`kernel`, `nvml`, `sysfs`: never
what a training process printed), over the job's whole history (one primary-key range, `job_id, host`), grouped
by category, Xid code and GPU: how many lines, the first and the last, the catalog action and the latest message.
The controller's side is the host's cordons and uncordons (verified `recovery_actions` targeting the host, any
job), newest first: when, which, by whom, why, for which incident.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import LOG_LINES, RECOVERY_ACTIONS

ATTESTED = ("kernel", "nvml", "sysfs")

_FACTS_SQL = f"""
SELECT category, xid, gpu_index AS gpu, sum(repeats) AS lines, toUnixTimestamp64Milli(min(ts)) AS first_ms,
       toUnixTimestamp64Milli(max(ts)) AS last_ms, arrayStringConcat(arraySort(groupUniqArray(4)(source)), ',')
           AS sources, argMax(action, ts) AS action, argMax(severity, ts) AS severity,
       substring(argMax(message, ts), 1, 300) AS message
FROM {LOG_LINES}
WHERE job_id = {{job:String}} AND host = {{host:String}} AND source IN {{sources:Array(String)}}
GROUP BY category, xid, gpu ORDER BY last_ms DESC LIMIT {{limit:UInt32}}
"""

_CORDONS_SQL = f"""
SELECT toUnixTimestamp64Milli(ts) AS t_ms, action, actor, reason, incident_id, job_id
FROM {RECOVERY_ACTIONS}
WHERE verified = 1 AND action IN ('cordon', 'uncordon') AND status = 'succeeded' AND target = {{target:String}}
ORDER BY ts DESC LIMIT {{limit:UInt32}}
"""


@dataclass(frozen=True, kw_only=True)
class FaultHistory:
    facts: list[Row]  # per (category, xid, GPU): lines, first/last, sources, catalog action, latest message
    cordons: list[Row]  # the host's cordons and uncordons, newest first


def fault_history(store: Store, job: str, host: str, *, limit: int = 50) -> FaultHistory:
    p = {"job": job, "host": host, "target": host, "sources": list(ATTESTED), "limit": limit}
    return FaultHistory(facts=store.rows("the host's hardware faults", _FACTS_SQL, p),
                        cordons=store.rows("the host's cordons", _CORDONS_SQL, p))
