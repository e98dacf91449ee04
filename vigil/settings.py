"""Settings shared by every vigil service: where state lives and how to reach Kafka and ClickHouse.

Environment variables use the prefix `VIGIL_` (fixed names other tooling relies on:
`VIGIL_HOME`, `VIGIL_KAFKA_BOOTSTRAP`, `VIGIL_CLICKHOUSE_DSN`). An optional TOML file
named by `VIGIL_CONFIG` supplies defaults; the environment wins over it. Each
service subclasses `VigilBaseSettings` with its own prefix (`VIGIL_ANALYZER_...`) and
`config_section`, and reads the matching `[analyzer]` table of the file.

A service's settings may be sectioned: a field whose type is a pydantic model (the
analyzer's `straggler: StragglerSettings`) is one section. Its values keep flat names
everywhere a user sets them — `VIGIL_ANALYZER_STRAGGLER_K`, `straggler_k = 3` in the
file's `[analyzer]` table (or `k = 3` in `[analyzer.straggler]`), `straggler_k=3` as a
keyword — and are folded into the section.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from vigil.errors import VigilError
from vigil.redact import shown_dsn


class SettingsError(VigilError, ValueError):
    """A setting has a bad value; the message names the setting."""


def _config_file_values(section: str | None) -> dict[str, Any]:
    path = os.environ.get("VIGIL_CONFIG")
    if not path:
        return {}
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise SettingsError(f"VIGIL_CONFIG={path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"VIGIL_CONFIG={path}: not valid TOML ({exc})") from None
    values = doc.get(section, {}) if section else {k: v for k, v in doc.items() if not isinstance(v, dict)}
    return dict(values) if isinstance(values, dict) else {}


class _FileSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], section: str | None) -> None:
        super().__init__(settings_cls)
        self._values = _config_file_values(section)

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        values = fold_sections(self.settings_cls, self._values)
        return {k: v for k, v in values.items() if k in self.settings_cls.model_fields}


def sections(settings_cls: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The section fields of a settings class: name -> its model."""
    out: dict[str, type[BaseModel]] = {}
    for name, info in settings_cls.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out[name] = info.annotation
    return out


def fold_sections(settings_cls: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """`{"straggler_k": 3}` -> `{"straggler": {"k": 3}}` for each section; other keys as they are."""
    secs = sections(settings_cls)
    if not secs:
        return values
    out: dict[str, Any] = {}
    flat: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        sec = next((s for s in secs if key.startswith(s + "_") and key[len(s) + 1:] in secs[s].model_fields), None)
        if sec is None:
            out[key] = value
        else:
            flat.setdefault(sec, {})[key[len(sec) + 1:]] = value
    for sec, sub in flat.items():
        given = out.get(sec, {})
        given = given.model_dump() if isinstance(given, BaseModel) else dict(given)
        out[sec] = {**given, **sub}
    return out


class _FoldedInit(PydanticBaseSettingsSource):
    """Keyword arguments, with flat section names folded into their sections."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._inner = inner

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return fold_sections(self.settings_cls, self._inner())


class VigilBaseSettings(BaseSettings):
    """Base of every settings class: env first, then the `VIGIL_CONFIG` file, then defaults."""

    config_section: ClassVar[str | None] = None
    # env `<PREFIX><SECTION>_<NAME>` -> section field NAME (the first `_` after the prefix splits)
    model_config = SettingsConfigDict(env_prefix="VIGIL_", extra="ignore", env_nested_delimiter="_",
                                      env_nested_max_split=1)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (_FoldedInit(settings_cls, init_settings), env_settings, _FileSource(settings_cls, cls.config_section))

    @classmethod
    def load(cls, **overrides: Any) -> Any:
        """Build the settings, turning validation errors into one readable SettingsError."""
        try:
            return cls(**overrides)
        except ValidationError as exc:
            prefix = str(cls.model_config.get("env_prefix", "VIGIL_"))
            parts = [
                f"{prefix}{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" if e["loc"]
                else f"{cls.__name__}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
            raise SettingsError("bad setting: " + "; ".join(parts)) from None


class VigilSettings(VigilBaseSettings):
    """Core settings: state directory, Kafka, ClickHouse, topics."""

    home: Path = Field(default=Path("~/.vigil"), description="state and data of the embedded stack")
    kafka_bootstrap: str | None = Field(default=None, description="host:port[,host:port]; unset = embedded broker")
    kafka_extra: dict[str, SecretStr] = Field(default_factory=dict, description="extra librdkafka settings (SASL, TLS); secret")
    clickhouse_dsn: SecretStr | None = Field(
        default=None, description="chdb:///path or http(s)://[user:password@]host:port; unset = chdb under home; secret")
    topic_prefix: str = "vigil."
    topic_partitions: int = Field(default=4, ge=1)
    topic_replication: int = Field(default=1, ge=1)
    topic_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=60_000)
    retention_days: int = Field(default=30, ge=1, description="ClickHouse TTL of telemetry rows")
    broker_port: int = Field(default=0, ge=0, le=65535, description="embedded broker port; 0 = a free one")
    control_port: int = Field(default=0, ge=0, le=65535, description="`vigil up` control port; 0 = a free one")

    @field_validator("home")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser().absolute()

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        for part in v.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {v!r}")
        return v.strip()

    @field_validator("clickhouse_dsn")
    @classmethod
    def _dsn(cls, v: SecretStr | None) -> SecretStr | None:
        raw = v.get_secret_value() if v is not None else ""
        if not raw.strip():
            return None
        if not raw.startswith(("chdb://", "http://", "https://")):
            raise ValueError(f"expected chdb:///path or http(s)://host:port, got {shown_dsn(raw)!r}")
        return v

    @property
    def embedded_kafka(self) -> bool:
        return self.kafka_bootstrap is None

    @property
    def effective_clickhouse_dsn(self) -> str:
        """The DSN to connect with (its password included: never print it; `shown_dsn` it)."""
        return self.clickhouse_dsn.get_secret_value() if self.clickhouse_dsn else f"chdb://{self.home / 'clickhouse'}"

    def kafka_extra_config(self) -> dict[str, str]:
        """The extra librdkafka settings, unwrapped: for building a client only."""
        return {k: v.get_secret_value() for k, v in self.kafka_extra.items()}

    def topic(self, logical: str) -> str:
        return f"{self.topic_prefix}{logical}"
