"""The fast path's structs are the pydantic models, field for field: a field added to one must fail here.

Without this check a new field in the contract would make msgspec refuse every record that carries
it (unknown field), and those records would silently take the slow path.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from vigil.contract import GpuState, Heartbeat, NicCounters, ParallelCoords, ProcessState, StepTiming
from vigil.contract.hotkinds import FastCoords, FastGpu, FastHeartbeat, FastNic, FastProcess, FastStep

pytestmark = [pytest.mark.pure]

PAIRS: list[tuple[type[Any], type[BaseModel]]] = [
    (FastStep, StepTiming), (FastCoords, ParallelCoords), (FastHeartbeat, Heartbeat), (FastGpu, GpuState),
    (FastProcess, ProcessState), (FastNic, NicCounters),
]
GENERATED = {"event_id", "ts"}  # defaults made on decode (a new id, now) by both paths


def differences(fast: type[Any], model: type[BaseModel]) -> list[str]:
    """Where the struct and the model disagree: a field one lacks, required-ness, a default."""
    fields = {f.name: f for f in msgspec.structs.fields(fast)}
    out = [f"{n}: only in {fast.__name__}" for n in sorted(set(fields) - set(model.model_fields))]
    out += [f"{n}: only in {model.__name__}" for n in sorted(set(model.model_fields) - set(fields))]
    for name, info in model.model_fields.items():
        f = fields.get(name)
        if f is None:
            continue
        if f.required != info.is_required():
            out.append(f"{name}: required differs")
        if f.required or info.is_required() or name in GENERATED:
            continue
        made = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        want = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
        if isinstance(want, BaseModel):
            want, made = want.model_dump(), msgspec.to_builtins(made)
        if made != want:
            out.append(f"{name}: default {made!r} != {want!r}")
    return out


@pytest.mark.parametrize(("fast", "model"), PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_every_field_of_the_model_is_a_field_of_the_struct_with_its_default(fast: type[Any],
                                                                             model: type[BaseModel]) -> None:
    assert differences(fast, model) == [], "the fast path must mirror the model (vigil.contract.fastwire)"


def test_a_field_added_to_the_model_or_a_changed_default_is_caught() -> None:
    class Wider(StepTiming):
        new_field: int = 0

    class Stricter(NicCounters):
        port: int  # type: ignore[assignment]

    class Other(Heartbeat):
        interval_s: float = 5.0

    assert differences(FastStep, Wider) == ["new_field: only in Wider"]
    assert differences(FastNic, Stricter) == ["port: required differs"]
    assert differences(FastHeartbeat, Other) == ["interval_s: default 2.0 != 5.0"]
