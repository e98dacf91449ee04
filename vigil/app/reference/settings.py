"""docs/settings.md: every setting of every service, from the settings classes themselves.

One table per service (its env prefix and `VIGIL_CONFIG` section), one row per setting: the environment
variable, the type, the default and the field's own description. Sectioned settings (a field whose type is a
model) get their rows under the flat names a user sets (`VIGIL_ANALYZER_STRAGGLER_K`). Secrets show no default.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from vigil.analyzer.settings import AnalyzerSettings
from vigil.collector.settings import CollectorSettings
from vigil.dashboard.settings import DashboardSettings
from vigil.metrics import MetricsSettings
from vigil.notify.settings import NotifySettings
from vigil.recovery.settings import RecoverySettings
from vigil.settings import VigilBaseSettings, VigilSettings

SERVICES: tuple[type[VigilBaseSettings], ...] = (VigilSettings, CollectorSettings, AnalyzerSettings,
                                                  RecoverySettings, DashboardSettings, NotifySettings, MetricsSettings)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or any(_is_secret(a) for a in typing.get_args(annotation))


def _default(field: FieldInfo) -> str:
    if _is_secret(field.annotation):
        return "(secret)"
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        factory = field.default_factory
        name = getattr(factory, "__name__", "")
        if name != "<lambda>" and factory not in (list, dict, set, tuple):
            return f"{getattr(factory, '__module__', '')}.{name}()".lstrip(".")  # computed where it runs
        value = factory()  # type: ignore[call-arg]
    else:
        return "(required)"
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return f"`{text}`".replace("|", "\\|")


def _section_model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _rows(prefix: str, fields: dict[str, FieldInfo]) -> list[str]:
    rows: list[str] = []
    for name, field in fields.items():
        section = _section_model(field.annotation)
        if section is not None:
            rows += _rows(f"{prefix}{name.upper()}_", section.model_fields)
            continue
        about = (field.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{prefix}{name.upper()}` | {_type_name(field.annotation)} | {_default(field)} | {about} |")
    return rows


def page() -> str:
    out = ["# Settings reference", "",
           "Generated from the settings classes by `python -m vigil.app.reference`; do not edit by hand.",
           "Every setting is an environment variable, or the same name in lower case (without the prefix) in the",
           "matching table of the TOML file named by `VIGIL_CONFIG`; the environment wins. A sectioned setting",
           "(`VIGIL_ANALYZER_STRAGGLER_K`) may also be set as `k` in `[analyzer.straggler]`.", ""]
    for cls in SERVICES:
        prefix = str(cls.model_config.get("env_prefix", "VIGIL_"))
        section = cls.config_section
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        out += [f"## {cls.__name__} (`{prefix}*`, `[{section}]`)" if section else f"## {cls.__name__} (`{prefix}*`)",
                "", *([doc, ""] if doc else []),
                "| variable | type | default | meaning |", "|---|---|---|---|",
                *_rows(prefix, cls.model_fields), ""]
    return "\n".join(out)
