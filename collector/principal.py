"""The agent as its own principal: the training code it launches cannot read, trace or write it.

The agent holds the host's identity (its signing key, its Kafka credentials); the training command it
starts is untrusted. `protect` makes the agent's process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`):
the kernel then hands its `/proc/<pid>/environ`, `mem`, `fd/*`, `maps` only to root and refuses a
ptrace attach from the same uid, so a child running as the agent's uid reads nothing of it either (a
core dump is off too). `scrub_secrets` removes the settings that hold a secret (`SECRET_VARS`) from
`os.environ` once they were read, and overwrites their bytes in the process's initial environment
block, the copy `/proc/<pid>/environ` shows, so not even root reads them there afterwards.

`RunAs` is `vigil run --user U --group G`: the training command (and the warm interpreters started for
it) get another uid/gid and that user's groups in the child (`subprocess`'s `user=`/`group=`/
`extra_groups=`: setgroups, setgid, setuid before exec), the agent keeps its own. Changing uid needs
root: `run_as` refuses clearly otherwise. Linux only; elsewhere `protect` returns False.
"""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
SECRET_VARS: tuple[str, ...] = ("VIGIL_SIGNING_PRIVATE_KEY", "VIGIL_KAFKA_EXTRA", "VIGIL_CLICKHOUSE_DSN")
"""Prefixes of the settings that hold a secret (`VIGIL_KAFKA_EXTRA_...` nested keys included)."""


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc is loaded (no ldconfig child)
    return int(libc.prctl(option, value, 0, 0, 0))


def protect() -> bool:
    """Make this process non-dumpable (True when it is now)."""
    if not sys.platform.startswith("linux"):
        return False
    return _prctl(PR_SET_DUMPABLE, 0) == 0 and _prctl(PR_GET_DUMPABLE, 0) == 0


def _environ_block() -> tuple[int, int] | None:
    """(start, end) address of this process's initial environment strings (fields 50-51 of /proc/self/stat)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[47]), int(fields[48])  # after ")": field 3 is index 0, so field 50 is index 47
    except (OSError, IndexError, ValueError):
        return None


def is_secret(name: str) -> bool:
    return name.startswith(SECRET_VARS)


def scrub_secrets() -> list[str]:
    """Drop the secret settings from `os.environ` and zero their bytes in the initial environment block; the
    names removed (call it once every setting was read)."""
    names = sorted(k for k in os.environ if is_secret(k))
    for name in names:
        del os.environ[name]
    block = _environ_block() if names and sys.platform.startswith("linux") else None
    if block is not None and 0 < block[0] < block[1]:
        start, end = block
        raw = ctypes.string_at(start, end - start)
        offset = 0
        for entry in raw.split(b"\0"):
            if is_secret(entry.split(b"=", 1)[0].decode(errors="replace")) and b"=" in entry:
                ctypes.memset(start + offset, 0, len(entry))  # nothing points at it: unsetenv dropped it
            offset += len(entry) + 1
    return names


@dataclass(frozen=True, kw_only=True)
class RunAs:
    """The uid, gid and supplementary groups the training command runs with."""

    uid: int
    gid: int
    groups: tuple[int, ...]

    def popen(self) -> dict[str, Any]:
        """`subprocess.Popen` keyword arguments that start a child as this identity."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def give(self, path: Path, mode: int = 0o700) -> Path:
        """`path` created (with its parents) and handed to this identity: the command writes there."""
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)
        return path


def _uid(user: str) -> tuple[int, int, str | None]:
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        return entry.pw_uid, entry.pw_gid, entry.pw_name
    except KeyError:
        if user.isdigit():
            return int(user), int(user), None  # a uid without a passwd entry (a container's): its own gid
        raise ValueError(f"--user {user!r}: no such user") from None


def _gid(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"--group {group!r}: no such group") from None


def run_as(user: str | None, group: str | None) -> RunAs | None:
    """The identity of `--user`/`--group` (None: the agent's own); ValueError when it cannot be taken."""
    if user is None and group is None:
        return None
    if os.geteuid() != 0:
        raise ValueError("--user/--group: the agent must run as root to start the command as another uid "
                         "(it keeps its own); run `vigil run` as root, or drop --user/--group")
    uid, gid, name = _uid(user) if user is not None else (os.getuid(), os.getgid(), None)
    if group is not None:
        gid = _gid(group)
    groups = tuple(g for g in os.getgrouplist(name, gid) if g != gid) if name else ()
    if uid == 0:
        raise ValueError("--user: the training command must not run as root")
    return RunAs(uid=uid, gid=gid, groups=groups)


def job_key_file(folder: Path, job: str, run_as: RunAs | None, given: Path | None = None) -> Path:
    """The job's snapshot and checkpoint integrity key (`vigil.recovery.checkpoint.integrity`) in `folder/<job>.key`,
    mode 0600, the command's uid's (the folder 0700, or 0711 when the command runs as another uid: it opens the file
    by name, nobody lists the folder). `given` (the operator's key file, e.g. a Secret shared by every node of the
    job, readable by the agent only) is copied there; else a random key is made once, by whichever agent of the job
    is first (written aside, then linked into place): the agents of one job on one machine share it."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o711 if run_as is not None else 0o700)
    path = folder / f"{job}.key"
    if given is not None or not path.exists():
        tmp = folder / f".{job}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, given.read_bytes().strip() if given is not None else secrets.token_hex(32).encode())
        finally:
            os.close(fd)
        try:
            if given is not None:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    if run_as is not None:
        os.chown(path, run_as.uid, run_as.gid)
    return path
