"""Where a running embedded stack can be reached: `$VIGIL_HOME/stack.json`.

`vigil up` writes it once every part is ready and removes it on exit. Commands
resolve the broker and the control port from it unless `VIGIL_KAFKA_BOOTSTRAP`
points at a production cluster. It holds the control port's token, so it is created
with mode 0600 (readable by the user running vigil only); `control_headers` is what a
client of the port sends.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vigil.errors import StackError
from vigil.settings import VigilSettings


@dataclass(frozen=True, kw_only=True)
class StackState:
    pid: int
    bootstrap: str
    clickhouse_dsn: str
    control_url: str
    broker_pid: int | None = None
    urls: dict[str, str] = field(default_factory=dict)
    token: str = ""

    @property
    def control_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def state_path(settings: VigilSettings) -> Path:
    return settings.home / "stack.json"


def write_state(settings: VigilSettings, state: StackState) -> None:
    path = state_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the token never sits in a readable file
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(asdict(state), indent=2))
    tmp.replace(path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(settings: VigilSettings) -> StackState | None:
    """The running stack's state, or None (a file left by a dead process is ignored)."""
    path = state_path(settings)
    try:
        doc = json.loads(path.read_text())
        state = StackState(**doc)
    except (OSError, ValueError, TypeError):
        return None
    return state if pid_alive(state.pid) else None


def clear_state(settings: VigilSettings) -> None:
    state_path(settings).unlink(missing_ok=True)


def resolve_bootstrap(settings: VigilSettings) -> str:
    """The Kafka bootstrap to use: the configured cluster, else the running embedded broker."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    state = read_state(settings)
    if state is None:
        raise StackError(
            f"no embedded stack is running under VIGIL_HOME={settings.home}: "
            "start one with `vigil up --detach`, or set VIGIL_KAFKA_BOOTSTRAP"
        )
    return state.bootstrap


def guard(home: Path, keys: Path) -> None:
    """`vigil up`'s own directories closed to other uids (a job run with `vigil run --user`): `home` and the key
    directory owned by this uid (else StackError) and writable by it alone (a job cannot add a trusted public key
    or swap a file), every private key in it mode 0600 (the public keys stay readable: agents verify with them)."""
    inside = keys.absolute().is_relative_to(home.absolute())  # a key directory elsewhere (a mounted Secret) is
    for folder in (home, keys) if inside else (home,):         # the operator's to lay out
        folder.mkdir(parents=True, exist_ok=True)
        st = folder.stat()
        if st.st_uid != os.geteuid():
            raise StackError(f"{folder} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}): refusing to "
                             "keep keys and the control token under it")
        if st.st_mode & 0o022:
            folder.chmod(st.st_mode & 0o755)
    for key in keys.glob("*.key") if inside else ():
        if key.stat().st_mode & 0o077:
            key.chmod(0o600)
