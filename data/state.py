"""`DataState`: how far an epoch has got — the shards done and the position inside each in-flight shard.

    {"version": 1, "epoch": 3, "done": "91", "offsets": "[[2,40]]"}

`done` is the set of shards whose every sample was consumed, as a hex bitmap (bit s: shard
s; "91" = shards 0, 4 and 7): a quarter of a character per shard however far the epoch got.
`offsets` gives, for each shard
read part-way, how many samples of its order were consumed (0 < offset < size). A shard
is always consumed from the front of its order, so these numbers describe the epoch's
progress completely, whatever world size produced it. The dict is small (at most one entry
per shard), JSON-safe, and world-size free: it is what goes into the checkpoint with the
model. Its keys are fixed and its leaves scalars (the bitmap, the offsets as JSON text): a fresh state
and a loaded one have the same layout, which the checkpointer's replicas must agree on
before a load. `from_dict` checks it against the plan and raises `ValueError` on anything that
does not fit (a checkpoint of another dataset is refused, never half-applied).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vigil.data.plan import EpochPlan, Piece

VERSION = 1


@dataclass(frozen=True)
class DataState:
    epoch: int = 0
    done: frozenset[int] = frozenset()
    offsets: Mapping[int, int] = field(default_factory=dict)

    def remaining(self, plan: EpochPlan) -> list[Piece]:
        """The work left in this epoch, one piece per unfinished shard, in the epoch's shard order."""
        return [Piece(s, self.offsets.get(s, 0), plan.size(s)) for s in plan.order(self.epoch) if s not in self.done]

    def after(self, plan: EpochPlan, consumed: Iterable[tuple[Piece, int]]) -> DataState:
        """This state once the first `n` samples of each `piece` were consumed (pieces start at their offsets)."""
        done, offsets = set(self.done), dict(self.offsets)
        for piece, n in consumed:
            if not 0 <= n <= len(piece) or piece.start != offsets.get(piece.shard, 0) or piece.shard in done:
                raise ValueError(f"{n} samples of {piece} do not continue {self}")
            position = piece.start + n
            if position == plan.size(piece.shard):
                done.add(piece.shard)
                offsets.pop(piece.shard, None)
            elif position > 0:
                offsets[piece.shard] = position
        return DataState(self.epoch, frozenset(done), offsets)

    def finished(self, plan: EpochPlan) -> bool:
        return len(self.done) == plan.num_shards

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "epoch": self.epoch, "done": format(sum(1 << s for s in self.done), "x"),
                "offsets": json.dumps([[s, o] for s, o in sorted(self.offsets.items())], separators=(",", ":"))}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], plan: EpochPlan) -> DataState:
        if doc.get("version") != VERSION:
            raise ValueError(f"data state version {doc.get('version')!r}, expected {VERSION}")
        epoch, mask, offsets = doc.get("epoch"), _bitmap(doc.get("done"), plan), _parse(doc.get("offsets"), plan)
        if not isinstance(epoch, int) or epoch < 0 or mask is None or not isinstance(offsets, list):
            raise ValueError("data state needs an epoch >= 0, a shard bitmap 'done' and a list 'offsets'")
        shards = range(plan.num_shards)
        if mask >> plan.num_shards:
            raise ValueError(f"data state 'done' names shards beyond the plan's {plan.num_shards}")
        done = [s for s in shards if mask >> s & 1]
        parsed: dict[int, int] = {}
        for item in offsets:
            if not (isinstance(item, list | tuple) and len(item) == 2 and all(isinstance(x, int) for x in item)):
                raise ValueError(f"data state offset {item!r} is not [shard, offset]")
            s, o = item
            if s not in shards or s in done or s in parsed or not 0 < o < plan.size(s):
                raise ValueError(f"data state offset {item!r} does not fit the plan")
            parsed[s] = o
        return cls(epoch, frozenset(done), parsed)


def _bitmap(text: Any, plan: EpochPlan) -> int | None:
    if not isinstance(text, str) or not 0 < len(text) <= plan.num_shards // 4 + 1:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _parse(text: Any, plan: EpochPlan) -> Any:
    if not isinstance(text, str) or len(text) > 48 * plan.num_shards + 2:  # at most one entry per shard
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
