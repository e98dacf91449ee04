"""The resource advisor's recommendation as an event: what it saw, what it predicts, how its last one fared.

`vigil advise --job J --publish` records an `advice` (topic `recovery`, signed by the operator
or the analyzer): the node count it recommends and the throughput it predicts there, the curve
(throughput per node count) it read, hot and starved hosts, the data loader's share of step time,
and `scored`, how the job's previous advice fared against what the job measured after it. The
recovery controller cites the latest advice of a job in its scale decisions; it does not obey it.
Bounded like every event: at most 256 curve points, 64 hosts per list, 32 reasons.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from vigil.contract.base import MODEL_CONFIG, U32, Event, Name, NonNegFloat, UtcDatetime, ValidFor

Reason = Annotated[str, Field(max_length=512)]


class AdvicePoint(BaseModel):
    """The job's median throughput (work per second) at one node count, over `steps` steps."""

    model_config = MODEL_CONFIG

    nodes: U32 = Field(ge=1)
    throughput: NonNegFloat
    steps: U32 = Field(ge=1)


class AdviceScore(BaseModel):
    """A previous advice's prediction at the node count the job then ran at, against what it measured."""

    model_config = MODEL_CONFIG

    advice_id: Name
    advised_at: UtcDatetime
    nodes: U32 = Field(ge=1)
    predicted: NonNegFloat
    measured: NonNegFloat
    error_pct: float = Field(ge=-100, le=1e6)


class Advice(Event):
    kind: Literal["advice"] = "advice"
    schema_version: Literal[1] = 1
    advice_id: Name
    nodes: U32 | None = Field(default=None, ge=1, description="recommended node count; None: too little history")
    current: U32 | None = Field(default=None, description="the node count the job ran at last")
    predicted: NonNegFloat | None = Field(default=None, description="throughput at `nodes` (work per second)")
    still_scaling: bool = False
    curve: list[AdvicePoint] = Field(default_factory=list, max_length=256)
    hot: list[Name] = Field(default_factory=list, max_length=64)
    starved: list[Name] = Field(default_factory=list, max_length=64)
    data_share: float | None = Field(default=None, ge=0, le=1)
    reasons: list[Reason] = Field(default_factory=list, max_length=32)
    scored: AdviceScore | None = None
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")
