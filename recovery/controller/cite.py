"""What the controller's scale decisions say about the job's latest advice (it cites, it does not obey).

The resource advisor's `advice` events arrive on the `recovery` topic (signed by the analyzer or
an operator; the gate refuses others). A plan that starts or restarts a job on some number of
hosts carries `details["advice"]`: the advice's id, its recommended node count and predicted
throughput, and how the plan's node count compares (`at`, `above`, `below`), so a reader of the
recovery history sees whether the decision went with the advice or against it, and why not.
"""

from __future__ import annotations

from typing import Any

from vigil.contract import Advice


def citation(advice: Advice | None, hosts: int | None) -> dict[str, Any] | None:
    """The `advice` entry of a plan's details; None without an advice or a recommendation."""
    if advice is None or advice.nodes is None:
        return None
    out: dict[str, Any] = {"advice_id": advice.advice_id, "recommended_nodes": advice.nodes,
                           "predicted_throughput": advice.predicted, "advised_at": advice.ts.isoformat()}
    if advice.scored is not None:
        out["previous_error_pct"] = round(advice.scored.error_pct, 1)
    if hosts is not None:
        out["plan_nodes"] = hosts
        out["versus"] = "at" if hosts == advice.nodes else "above" if hosts > advice.nodes else "below"
    return out


def phrase(cited: dict[str, Any]) -> str:
    """One clause for the plan's reason: `advice X recommends 4 nodes (this plan: 6, above it)`."""
    tail = f" (this plan: {cited['plan_nodes']}, {cited['versus']} it)" if "plan_nodes" in cited else ""
    return f"advice {cited['advice_id']} recommends {cited['recommended_nodes']} nodes{tail}"
