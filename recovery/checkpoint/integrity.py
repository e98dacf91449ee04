"""The job's integrity key: only its ranks can write a snapshot or checkpoint marker that counts.

A marker lists the sha256 of its files, so it detects corruption; anyone who can write the directory
can recompute it, though. With a job key every marker also carries ``mac``, an HMAC-SHA256 of the
marker's JSON (keys sorted, without ``mac``) under that key; a marker without a valid one is not a
snapshot or a checkpoint: never listed, never loaded (no pickle, not even DCP's metadata, is read),
and pruned as an incomplete attempt.

The key is a file, never the environment: `VIGIL_CHECKPOINT_KEY_FILE` names it (`vigil run` creates
one per job, mode 0600, the job's uid's; the ranks of every host of a job need the same file: a
mounted Secret in a cluster). A file of another uid or open to others is refused (ValueError: the
checkpointer does not start rather than run unprotected). Without the variable there is no key:
markers are checked by their digests only, as before. Turning a key on makes the markers written
without one (or with another) count no more: they are pruned like planted ones.

`private_dir` creates a snapshot root mode 0700, owned by this uid, and refuses an existing one owned
by another (whoever owns it could read the job's weights or plant a snapshot). Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from vigil.trainside import env

KEY_FILE_VAR = env.CHECKPOINT_KEY_FILE
MAC = "mac"
_cache: dict[str, bytes] = {}


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The key in `path`; ValueError when the file is another uid's or readable by others, or too short."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ValueError(f"{path}: the job key must be this uid's ({os.geteuid()}) and mode 0600")
        key = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(key) < 32:
        raise ValueError(f"{path}: the job key is shorter than 32 bytes")
    return key


def job_key() -> bytes | None:
    """The key of `VIGIL_CHECKPOINT_KEY_FILE` (read once per path), or None when it is not set."""
    path = os.environ.get(KEY_FILE_VAR)
    if not path:
        return None
    if path not in _cache:
        _cache[path] = read_key(path)
    return _cache[path]


def _mac(doc: dict[str, Any], key: bytes) -> str:
    body = json.dumps({k: v for k, v in doc.items() if k != MAC}, sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def seal(doc: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """`doc` with its ``mac`` under `key` (unchanged without one)."""
    return doc if key is None else {**doc, MAC: _mac(doc, key)}


def authentic(doc: dict[str, Any], key: bytes | None) -> bool:
    """True when `doc` carries a valid ``mac`` under `key` (always, without a key)."""
    if key is None:
        return True
    given = doc.get(MAC)
    return isinstance(given, str) and hmac.compare_digest(given, _mac(doc, key))


def private_dir(path: Path) -> Path:
    """`path` (and missing parents) as a directory of this uid, mode 0700; PermissionError when it exists and
    belongs to another uid."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this job's ({os.geteuid()}): "
                              "refusing to keep or read snapshots there")
    if st.st_mode & 0o077:
        path.chmod(0o700)
    return path
