"""The key set on disk: one Ed25519 key pair per role and key id, created, rotated and retired here.

Layout of the key directory (`SigningSettings.directory`, default ``<VIGIL_HOME>/keys``):
``<role>.<key id>.key`` is a private key (PEM PKCS#8, mode 0600, written with O_EXCL so it is never
readable by others, not even for a moment), ``<role>.<key id>.pub`` its public key (mode 0644),
``<role>.current`` the key id the role signs with. Agents hold **per-host** keys (`hostkeys`):
``agent.<host>+<stamp>.key`` with ``agent.<host>.current``, so a fact they attest names the host whose
key signed it, and the controller accepts it only for that host. Rotation creates a new key id and makes it
current; the old public key stays listed, so verifiers keep accepting what was signed with it,
until `retire` removes it. A verifier needs the ``.pub`` files only; the ``.key`` files of a role
belong on the machines of that role's service.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from vigil.errors import VigilError

log = logging.getLogger(__name__)


class Role(StrEnum):
    """Who may make which decision (`policy.expected_roles`), and who attests which fact.

    `AGENT` makes no decision: each node agent under recovery control holds a key of its own host
    (`hostkeys`: its key id names the host) and attests with it the facts that decide (`member`
    reports, acknowledgements, diagnostic results, the checkpoints it ships: `policy.attested_kind`);
    the controller accepts such a fact only under the key of the host it speaks for.
    """

    CONTROLLER = "controller"
    ANALYZER = "analyzer"
    OPERATOR = "operator"
    AGENT = "agent"


class KeyStoreError(VigilError):
    """A key is missing, unreadable or malformed."""


KEY_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\+)?[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$")
"""A key id: a time stamp and 8 random hex digits, with ``<host>+`` before it for a host's agent key."""
SERVICES = (Role.CONTROLLER, Role.ANALYZER, Role.OPERATOR)  # the roles `ensure` makes: agents' keys are per host


@dataclass(frozen=True)
class KeyInfo:
    role: Role
    key_id: str
    current: bool
    private: bool


@dataclass(frozen=True)
class KeyStore:
    directory: Path

    def _path(self, role: Role, key_id: str, suffix: str) -> Path:
        return self.directory / f"{role.value}.{key_id}.{suffix}"

    def _current(self, role: Role, host: str) -> Path:
        return self.directory / (f"{role.value}.{host}.current" if host else f"{role.value}.current")

    def current_id(self, role: Role, host: str = "") -> str | None:
        """The key id `role` signs with (of `host`: an agent's per-host key)."""
        try:
            kid = self._current(role, host).read_text().strip()
        except OSError:
            return None
        return kid if KEY_ID.match(kid) and kid.startswith(f"{host}+" if host else "") else None

    def ensure(self, roles: tuple[Role, ...] = SERVICES) -> dict[Role, str]:
        """Every role in `roles` has a current key (created where missing); returns their key ids."""
        return {role: self.current_id(role) or self.rotate(role) for role in roles}

    def issue(self, host: str) -> str:
        """`host`'s agent key (created when it has none): the key its agent attests that host's facts with."""
        return self.current_id(Role.AGENT, host) or self.rotate(Role.AGENT, host)

    def rotate(self, role: Role, host: str = "") -> str:
        """A new key pair for `role` (of `host`), made current; earlier public keys stay listed."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        kid = f"{host + '+' if host else ''}{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"
        if not KEY_ID.match(kid):
            raise KeyStoreError(f"{host!r} cannot name a key (letters, digits, '.', '_', '-'; at most 128)")
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        fd = os.open(self._path(role, kid, "key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
        self._write(self._path(role, kid, "pub"), pub)
        self._write(self._current(role, host), kid.encode() + b"\n")
        return kid

    def retire(self, role: Role, key_id: str) -> None:
        """Stop accepting `key_id` of `role` (its files are removed); the current key cannot be retired."""
        if key_id == self.current_id(role, key_id.partition("+")[0] if "+" in key_id else ""):
            raise KeyStoreError(f"{role.value} key {key_id} is current: rotate first")
        found = False
        for suffix in ("key", "pub"):
            try:
                self._path(role, key_id, suffix).unlink()
                found = True
            except FileNotFoundError:
                pass
        if not found:
            raise KeyStoreError(f"no {role.value} key {key_id} in {self.directory}")

    def private_key(self, role: Role, host: str = "") -> tuple[str, Ed25519PrivateKey]:
        kid = self.current_id(role, host)
        if kid is None:
            how = f"`vigil keys issue {host}`" if host else "`vigil keys create`"
            raise KeyStoreError(f"no current {role.value} key{' of ' + host if host else ''} in {self.directory} "
                                f"(run {how})")
        try:
            key = serialization.load_pem_private_key(self._path(role, kid, "key").read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise KeyStoreError(f"cannot read the {role.value} private key {kid}: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyStoreError(f"{role.value} key {kid} is not an Ed25519 key")
        return kid, key

    def public_keys(self) -> dict[tuple[Role, str], Ed25519PublicKey]:
        """Every listed public key, by (role, key id); unreadable or foreign files are skipped, and so is a file that
        neither this process's uid nor root owns, or that its group or others may write (`_trusted_file`)."""
        out: dict[tuple[Role, str], Ed25519PublicKey] = {}
        try:
            files = sorted(self.directory.glob("*.pub"))
        except OSError:
            return out
        for path in files:
            role_name, _, kid = path.name.removesuffix(".pub").partition(".")
            if role_name not in {r.value for r in Role} or not KEY_ID.match(kid):
                continue
            try:
                if not _trusted_file(path):
                    continue
                key = serialization.load_pem_public_key(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(key, Ed25519PublicKey):
                out[(Role(role_name), kid)] = key
        return out

    def listing(self) -> list[KeyInfo]:
        return [KeyInfo(role=role, key_id=kid, current=self.current_id(role, host_of(kid)) == kid,
                        private=self._path(role, kid, "key").exists())
                for role, kid in sorted(self.public_keys())]

    def hosts(self) -> list[str]:
        """The hosts with a current agent key here."""
        return sorted({h for role, kid in self.public_keys() if role is Role.AGENT and (h := host_of(kid))
                       and self.current_id(Role.AGENT, h)})

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        os.replace(tmp, path)


def host_of(key_id: str) -> str:
    """The host a per-host key id names ("" for a role's key)."""
    host, plus, _ = key_id.rpartition("+")
    return host if plus else ""


def _trusted_file(path: Path) -> bool:
    """A public key file trust may rest on: owned by this uid or root, writable by its owner alone. A training job
    of another uid that could write into the key directory (or a group-writable file) must not add a key every
    verifier then trusts (an attacker's review); such a file is skipped with a warning."""
    st = path.stat()
    if st.st_uid in (0, os.getuid()) and not st.st_mode & 0o022:
        return True
    log.warning("ignoring public key %s: owned by uid %d, mode %o (trusted: this uid or root, no group/other write)",
                path, st.st_uid, st.st_mode & 0o777)
    return False

