"""Elastic data for training jobs: every sample of an epoch exactly once across restarts and resizes.

    from vigil.data import ElasticSampler, ShardReader, Mode

An epoch is a seeded, shuffled list of shards (`plan`); its progress — the shards done and
the position inside each in-flight shard — is a small world-size-free dict (`state`) that
is checkpointed with the model. A restart on another world size re-splits the remaining
work over the new ranks, statically (`split`: the same deal computed on every rank),
dynamically (`dynamic`: pieces claimed on demand from the job store's atomic counter) or
balanced (`balanced`: a step's samples claimed a micro-batch at a time, so a slow rank
reads fewer without a restart).
`stream` holds the segment logic shared by the map-style `sampler` and the streaming
`reader`. Training side: imports only the standard library and torch. See data/README.md.
"""

from vigil.data.plan import EpochPlan, Piece
from vigil.data.reader import ShardReader
from vigil.data.sampler import ElasticSampler
from vigil.data.state import DataState
from vigil.data.stream import ElasticStream, Mode, Segment

__all__ = ["DataState", "ElasticSampler", "ElasticStream", "EpochPlan", "Mode", "Piece", "Segment", "ShardReader"]
