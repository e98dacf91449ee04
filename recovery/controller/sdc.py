"""The transient/persistent verdict on a silent-data-corruption or numeric-fault incident (issue 51), pure.

A replica named by the digest majority (or a rank named by the numeric detector) may hold a bad GPU, a bad batch or a
one-off flip; they look alike from the telemetry. The replay tells them apart:

1. `replay_start`: restore the newest in-memory snapshot taken at or before the last step the suspect still agreed
   at (`good_step` of the incident's evidence; else strictly before the first bad step): a snapshot taken after the
   corruption would replay it.
2. Recompute the steps from there to the first bad step twice: on the suspect host (`suspect`), and with the suspect
   replaced by a spare or a peer fed the suspect's batches (`peer`). On one machine there is no peer: the suspect
   re-runs, and its digest is compared with the majority's.
3. `decide` on what each replay saw (`Replay.reproduced`: its digest at the bad step differs from the majority of its
   replicas' in the same replay, not the original run's: the original majority already averaged in the suspect's bad
   gradients; or the numbers turned non-finite again; None: the replay did not finish):

   | suspect reproduced | peer reproduced | verdict | action |
   |---|---|---|---|
   | yes | no | persistent: the GPU | cordon the host, within the breaker (`cordon_allowance`) |
   | yes | none ran | persistent (weak: one machine cannot tell the GPU from the batch) | cordon, within the breaker |
   | yes | yes | batch: the same result everywhere | skip the batch through the sampler state, recorded |
   | no | any | transient | count it against the host (fleet memory, fault class `sdc`) |
   | unfinished | any | undecided | nothing beyond the incident's own recovery |

`outcome` is the decision as it is recorded: a `diagnose` recovery step on the suspect host with the verdict, the
steps recomputed, the snapshot step and the action in its details, published (and so signed) by the controller like
its other decisions. What runs the replays (the agents, the training loop's restore hook) is the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vigil.contract import RecoveryAction
from vigil.contract.decisions import RecoveryStep

FAULT_CLASS = "sdc"  # what fleet memory counts a transient against (`fleetmemory.classes`)


class Verdict(StrEnum):
    PERSISTENT = "persistent"  # the suspect's hardware: it differs again there and nowhere else
    BATCH = "batch"  # the input: the same result everywhere
    TRANSIENT = "transient"  # not reproduced: a one-off
    UNDECIDED = "undecided"  # a replay did not finish


class Action(StrEnum):
    CORDON = "cordon"
    CORDON_REFUSED = "cordon_refused"  # persistent, but the breaker allows no further cordon now
    SKIP_BATCH = "skip_batch"
    COUNT = "count"
    NONE = "none"


@dataclass(frozen=True, kw_only=True)
class Replay:
    host: str
    reproduced: bool | None  # None: the replay did not finish
    steps: int  # steps recomputed


def reproduced(digest: int | None, majority: int) -> bool | None:
    """Whether a replay's digest at the bad step shows the fault again: it differs from the majority of its replicas'
    in the same replay (None: no digest came back)."""
    return None if digest is None else digest != majority


def replay_start(snapshots: Iterable[int], evidence: Mapping[str, Any]) -> int | None:
    """The step of the newest snapshot from before the divergence (None: none is old enough)."""
    good, bad = evidence.get("good_step"), int(evidence["step"])
    limit = int(good) if good is not None else bad - 1
    older = [s for s in snapshots if s <= limit]
    return max(older) if older else None


def decide(suspect: Replay | None, peer: Replay | None) -> tuple[Verdict, bool]:
    """(the verdict, strong): see the module's table."""
    if suspect is None or suspect.reproduced is None:
        return Verdict.UNDECIDED, False
    if not suspect.reproduced:
        return Verdict.TRANSIENT, True
    if peer is None or peer.reproduced is None:
        return Verdict.PERSISTENT, False
    return (Verdict.BATCH, True) if peer.reproduced else (Verdict.PERSISTENT, True)


def action_for(verdict: Verdict, allowance: int) -> Action:
    """What the verdict asks of the controller; `allowance`: cordons the breaker allows now (`cordon_allowance`)."""
    if verdict is Verdict.PERSISTENT:
        return Action.CORDON if allowance > 0 else Action.CORDON_REFUSED
    return {Verdict.BATCH: Action.SKIP_BATCH, Verdict.TRANSIENT: Action.COUNT}.get(verdict, Action.NONE)


def outcome(*, job_id: str, incident_id: str, evidence: Mapping[str, Any], snapshot_step: int | None,
            suspect: Replay | None, peer: Replay | None, allowance: int, breaker_why: str = "",
            epoch: int = 0) -> RecoveryAction:
    """The verdict as a recovery step (`diagnose` on the suspect host, succeeded), to publish signed."""
    verdict, strong = decide(suspect, peer)
    action = action_for(verdict, allowance)
    host = str(evidence.get("host") or (suspect.host if suspect else "*"))
    recomputed = sum(r.steps for r in (suspect, peer) if r is not None)
    why = {Verdict.PERSISTENT: f"differs again on {host}" + ("" if peer else " (no peer replayed it)"),
           Verdict.BATCH: "the same result on the suspect and its peer: the batch",
           Verdict.TRANSIENT: f"not reproduced on {host}", Verdict.UNDECIDED: "a replay did not finish"}[verdict]
    if action is Action.CORDON_REFUSED:
        why += f"; cordon refused by the breaker: {breaker_why}"
    details: dict[str, Any] = {
        "replay": {"verdict": str(verdict), "strong": strong, "action": str(action),
                   "steps_recomputed": recomputed, "snapshot_step": snapshot_step,
                   "first_bad_step": int(evidence["step"]), "rank": evidence.get("rank"),
                   "suspect": None if suspect is None else {"host": suspect.host, "reproduced": suspect.reproduced},
                   "peer": None if peer is None else {"host": peer.host, "reproduced": peer.reproduced}},
        "fault_classes": [FAULT_CLASS] if action is Action.COUNT or verdict is Verdict.PERSISTENT else [],
    }
    if action is Action.SKIP_BATCH:
        good = evidence.get("good_step")  # the bad batch is one of the steps after the last agreed one, up to the first bad
        details["skip"] = {"from_step": int(good) + 1 if good is not None else int(evidence["step"]),
                           "to_step": int(evidence["step"]), "rank": evidence.get("rank")}
    return RecoveryAction(job_id=job_id, host=host, action=RecoveryStep.DIAGNOSE, target=host, status="succeeded",
                          reason=f"replay verdict {verdict}: {why}"[:4096], incident_id=incident_id,
                          actor="controller", details=details, epoch=epoch)
