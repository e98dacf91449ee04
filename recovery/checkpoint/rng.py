"""`RNGState`: the random number generators of this process as one `Stateful`.

    state = {"train": TrainState(model, opt), "rng": RNGState(loader_generator)}

Saved with the rest of the state (a snapshot, a checkpoint), it makes a resumed run draw the
same numbers as an uninterrupted one: torch's CPU generator, CUDA's (when available), Python's
`random`, and any `torch.Generator` the caller passes (a data loader's, a sampler's). Restoring
sets each one back. Values are tensors and plain tuples (loadable with ``weights_only``).
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful


class RNGState(Stateful):
    """torch (CPU, CUDA), Python `random` and the given generators, saved and set back."""

    def __init__(self, *generators: torch.Generator) -> None:
        self.generators = generators

    def state_dict(self) -> dict[str, Any]:
        sd: dict[str, Any] = {
            "torch": torch.get_rng_state(),
            "python": _py_state(random.getstate()),
            "generators": [g.get_state() for g in self.generators],
        }
        if torch.cuda.is_available():
            sd["cuda"] = torch.cuda.get_rng_state_all()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.set_rng_state(state_dict["torch"])
        version, internal, gauss = state_dict["python"]
        random.setstate((int(version), tuple(int(x) for x in internal), gauss))
        for g, s in zip(self.generators, state_dict["generators"], strict=True):
            g.set_state(s)
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


def _py_state(state: tuple[Any, ...]) -> list[Any]:
    version, internal, gauss = state
    return [version, list(internal), gauss]
