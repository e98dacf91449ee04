"""Signing settings: where the key set lives and whether unsigned decisions are refused.

Environment `VIGIL_SIGNING_<NAME>` or the `[signing]` table of the `VIGIL_CONFIG` file.
`private_key` (PEM, for a service that gets its key from a secret store instead of a file) is a
SecretStr: it is never printed or logged.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from vigil.settings import VigilBaseSettings


class SigningSettings(VigilBaseSettings):
    config_section = "signing"
    model_config = SettingsConfigDict(env_prefix="VIGIL_SIGNING_", extra="ignore")

    keys_dir: Path | None = Field(default=None, description="the key set; unset = <VIGIL_HOME>/keys")
    private_key: SecretStr | None = Field(default=None, description="PEM Ed25519 private key of this service's "
                                          "role, instead of the key file")
    key_id: str = Field(default="", description="the key id of `private_key`")
    reload_s: float = Field(default=2.0, ge=0, description="least seconds between re-reads of the public keys "
                            "when an unknown key id arrives (rotation)")
    refresh_s: float = Field(default=30.0, gt=0, description="seconds between re-reads of the public keys "
                             "whatever arrives: a retired key stops being trusted within it")

    @field_validator("keys_dir")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser().resolve() if v is not None else None

    def directory(self, home: Path) -> Path:
        return self.keys_dir or home / "keys"
