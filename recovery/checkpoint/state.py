"""`TrainState`: a model and its optimizer as one `Stateful`, the way DCP expects them.

    state = {"train": TrainState(model, optimizer), "extra": {"seen_tokens": n}}
    ckpt.save(step, state)
    ckpt.load_latest(state)

`torch.distributed.checkpoint.state_dict.get_state_dict` gives keys by parameter name
(not by position), unwraps DDP/FSDP/`torch.compile` wrappers, and creates the optimizer's
state before the first step, so a freshly built optimizer can be loaded into: loading
fills only the keys the target already has, and a fresh `optimizer.state_dict()` has none.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful


class TrainState(Stateful):
    """A model and (optionally) its optimizer, saved and loaded through DCP's state_dict API."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        options: StateDictOptions | None = None,
    ) -> None:
        self.model, self.optimizer, self.options = model, optimizer, options

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model, options=self.options)}
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self.options)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.optimizer is None:
            set_model_state_dict(self.model, state_dict["model"], options=self.options)
            return
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
            options=self.options,
        )
