"""A recommendation as the `advice` event that records it (with the score of the previous advice).

Pure. The event is bounded like the contract wants it: reasons cut to 512 characters and 32
entries, at most 64 hot or starved hosts, 256 curve points; its id names the job and the
instant, so two advices of one job never share one.
"""

from __future__ import annotations

from datetime import datetime

from vigil.analyzer.advisor.core import Recommendation
from vigil.contract import Advice, AdvicePoint, AdviceScore


def advice_event(rec: Recommendation, now: datetime, scored: AdviceScore | None = None,
                 host: str = "advisor") -> Advice:
    return Advice(
        job_id=rec.job_id, host=host, ts=now, advice_id=f"{rec.job_id}/advice/{now:%Y%m%dT%H%M%S%f}",
        nodes=rec.nodes, current=rec.current, predicted=rec.predicted, still_scaling=rec.still_scaling,
        curve=[AdvicePoint(nodes=p.nodes, throughput=p.throughput, steps=p.steps) for p in rec.curve[:256]],
        hot=list(rec.hot[:64]), starved=list(rec.starved[:64]),
        data_share=None if rec.data_share is None else min(1.0, max(0.0, rec.data_share)),
        reasons=[r[:512] for r in rec.reasons[:32]], scored=scored)
