"""The fast path over columnar records (`wire.COLUMNAR`): a hot kind's fields decoded a column at a time, in C.

`decode_columns(value)` reads a step or NIC record, either shape, into its *event columns*: one
list per field of the event (a nested object's fields as `coords.dp`, ...; a field the record
leaves out filled with its default), with no object per event when the record is columnar. It
is `fastwire.decode_hot` by columns, and it stays exact the same way:

* The columnar decoders are generated from the fast-path structs (`hotkinds.FastStep`,
  `FastNic`): each field becomes an array of that field's type, with its constraints; so a
  field added to the contract is a column here, and a column the structs do not know sends the
  record to pydantic (`forbid_unknown_fields`). `event_id` and `ts` are required columns: a
  value a decoder fills in would differ between two decodes of the record.
* Every check `decode_hot` makes of a row record is made of the columns: a plain record (ASCII,
  no escape, no DEL), no time finer than the microsecond, integers within UInt64 (a column at a
  time), every time UTC and in range, and every column holding `rows` values.
* Anything it does not take (`None`) goes to `wire.decode_batch`, which reads the record as
  rows and judges each event with pydantic, reasons and all. tests/backbone/test_fastwire.py
  checks, on the odd-event corpus written as columns, that both paths decide alike with the same
  values.

`events_of(kind, cols)` turns event columns back into the fast-path structs, for a consumer (or a
batch that leaves the steady state) that needs the events one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

from vigil.contract.hotkinds import HOT_PREFIXES, FastEvent, FastNic, FastStep
from vigil.contract.wirechecks import doubted, times_ok, u64_fit

EventColumns = dict[str, list[Any]]
"""One kind's events as columns: field name (a nested object's as `name.sub`) -> one value per event."""
_ENVELOPE = ("kind", "schema_version")
_U64 = {"step": ("step", "tokens", "samples"), "nic": ("tx_bytes", "rx_bytes")}


class _Field(msgspec.Struct, frozen=True):
    name: str  # as the record names the column (`coords.dp`)
    attr: str  # the columnar struct's attribute
    default: Callable[[int], list[Any]] | None  # n -> n default values; None: a required column


def _defaults(f: msgspec.structs.FieldInfo) -> Callable[[int], list[Any]] | None:
    if f.required:
        return None
    if f.default_factory is not msgspec.NODEFAULT:
        factory = f.default_factory
        return lambda n: [factory() for _ in range(n)]
    value = f.default
    return lambda n: [value] * n


def _layout(model: type[Struct]) -> tuple[list[_Field], list[tuple[str, Any, Any]]]:
    """The event's fields as columns (nested structs flattened) and the columnar struct's field definitions."""
    fields: list[_Field] = []
    defs: list[tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(model):
        if f.name in _ENVELOPE:
            continue
        subs = msgspec.structs.fields(f.type) if isinstance(f.type, type) and issubclass(f.type, Struct) else None
        for g, prefix in ((s, f"{f.name}.") for s in subs) if subs is not None else ((f, ""),):
            name, attr = prefix + g.name, prefix.replace(".", "_") + g.name
            default = None if f.name in ("event_id", "ts") else _defaults(g)
            fields.append(_Field(name=name, attr=attr, default=default))
            if default is None:
                defs.append((attr, list[g.type], msgspec.field(name=name)))  # type: ignore[name-defined]
            else:  # left out: UNSET (a column sent as null is no array: pydantic refuses the record)
                defs.append((attr, list[g.type] | UnsetType, msgspec.field(default=UNSET, name=name)))  # type: ignore[name-defined]
    return fields, defs


def _decoder(kind: str, model: type[Struct]) -> tuple[list[_Field], msgspec.json.Decoder[Any]]:
    fields, defs = _layout(model)
    cols = msgspec.defstruct(f"{kind}_columns", defs, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False)
    record = msgspec.defstruct(f"{kind}_column_record", [("kind", Literal[kind]), ("schema_version", Literal[1]),
                                                         ("rows", int), ("columns", cols)],
                               frozen=True, forbid_unknown_fields=True)
    return fields, msgspec.json.Decoder(record)


MODELS: dict[str, type[FastStep] | type[FastNic]] = {"step": FastStep, "nic": FastNic}
_DECODERS = {kind: _decoder(kind, model) for kind, model in MODELS.items()}
_COLUMNAR = {kind: HOT_PREFIXES[kind] + b'"rows":' for kind in MODELS}


def is_columnar(value: bytes | None) -> str | None:
    """The hot kind of a columnar record as the producer writes it (by its first bytes), else None."""
    if value is not None:
        for kind, prefix in _COLUMNAR.items():
            if value.startswith(prefix):
                return kind
    return None


def rows_claimed(value: bytes) -> int:
    """About how many events a columnar record holds, for sizing a batch: the row count its head claims, at most what
    its size can hold (a row's event_id alone takes 11 bytes: 8 characters, 2 quotes, a comma), and that most when
    the head cannot be read (1 for a record that is not columnar). The decode takes a record only when its columns
    hold exactly the rows claimed."""
    most = max(1, len(value) // 11)
    kind = is_columnar(value)
    if kind is None:
        return 1
    head = value[len(_COLUMNAR[kind]):len(_COLUMNAR[kind]) + 32].lstrip(b" \t\r\n")
    n = len(head) - len(head.lstrip(b"0123456789"))
    return max(1, min(int(head[:n]), most)) if 0 < n <= 9 else most


def _fit(kind: str, cols: EventColumns) -> bool:
    """decode_hot's UInt64 checks, a column at a time in C (a NIC's `extra` values too)."""
    return u64_fit(cols[n] for n in _U64[kind]) and (kind != "nic" or u64_fit(map(dict.values, cols["extra"])))


def decode_columnar(value: bytes, kind: str, now: datetime | None = None) -> EventColumns | None:
    """A columnar record of hot `kind` as event columns when the fast path takes every event of it, else None."""
    if doubted(value):
        return None
    fields, decoder = _DECODERS[kind]
    try:
        record = decoder.decode(value)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
        return None
    rows, got = record.rows, record.columns
    cols: EventColumns = {}
    for f in fields:
        values = getattr(got, f.attr)
        if values is UNSET:
            assert f.default is not None
            values = f.default(rows)
        elif len(values) != rows:
            return None
        cols[f.name] = values
    return cols if times_ok(cols["ts"], now) and _fit(kind, cols) else None


def columns_of(kind: str, events: list[Any]) -> EventColumns:
    """Fast-path structs (or pydantic models: the same attributes) of one kind as event columns."""
    out: EventColumns = {}
    for f in _DECODERS[kind][0]:
        path = f.name.split(".")
        values = list(map(attrgetter(path[0]), events))
        out[f.name] = list(map(attrgetter(path[1]), values)) if len(path) == 2 else values
    return out


def events_of(kind: str, cols: EventColumns) -> list[FastEvent]:
    """Event columns as the fast-path structs, one per row (what `fastwire.decode_hot` makes of the rows)."""
    model = MODELS[kind]
    plain: dict[str, list[Any]] = {}
    nested: dict[str, dict[str, list[Any]]] = {}
    for name, values in cols.items():
        head, _, sub = name.partition(".")
        if sub:
            nested.setdefault(head, {})[sub] = values
        else:
            plain[name] = values
    types = {f.name: f.type for f in msgspec.structs.fields(model)}
    for head, subs in nested.items():
        plain[head] = [types[head](**dict(zip(subs, row, strict=True))) for row in zip(*subs.values(), strict=True)]
    names = list(plain)
    return [model(**dict(zip(names, row, strict=True))) for row in zip(*plain.values(), strict=True)]
