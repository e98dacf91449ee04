"""Where checkpoints live, how one is committed, and which ones are kept.

    <directory>/
      step-0000001200-3fa9c2d1/      one attempt to save step 1200 (token: rank 0's, per attempt)
        __0_0.distcp  __1_0.distcp   each rank's part (torch.distributed.checkpoint files)
        .metadata                    DCP's global metadata, written by rank 0 after every part
        _COMMITTED                   the commit marker: JSON, written last, atomically

A checkpoint counts if and only if its `_COMMITTED` marker exists, names the directory's
own step and token, and lists the sha256 of every other file of the directory
(``files``: relative name -> hex digest). The persister writes it only after `dcp.save`
returned, which on rank 0 means every rank's files were written (and fsynced with
`sync_files`) and `.metadata` was renamed into place; rank 0 then hashes every file. The
marker is written atomically (see `stores`): a crash at any point leaves either no marker
(the attempt is ignored, then pruned) or a whole one. A marker of the old format (no
digests), or a directory planted without one, never counts.

`verify` re-hashes a committed checkpoint before it is restored: a missing, changed or
extra file is a mismatch (the caller reports it and tries the next older one). The digests
detect corruption and tampering after the commit; with the job's integrity key (`integrity`)
the marker's ``mac`` also authenticates the writer: a marker planted by whoever can write the
directory but holds no key is not a commit (never restored, no file of it read; pruned).

Each attempt has its own directory (the token), so re-saving a step after a restart never
mixes with a torn attempt of the same step, nor overwrites a committed one in place.

"Newest" is the highest committed *step* (then the marker time, then the name): never a
wall clock alone, so a marker dated in the future (a clock jump on rank 0) does not win
over later steps. After a deliberate rollback, remove the abandoned later checkpoints.
`prune` keeps the newest `keep` complete checkpoints and removes every incomplete attempt,
but never a complete checkpoint of a higher step than the one just committed; it runs on
rank 0 after a commit, while no other save is in flight.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from vigil.recovery.checkpoint.integrity import authentic, seal
from vigil.recovery.checkpoint.stores import Store

MARKER = "_COMMITTED"
FORMAT = "vigil-checkpoint/2"
LEGACY = "vigil-checkpoint/1"  # markers without digests: they no longer count
_NAME = re.compile(r"^step-(\d{10,})-([0-9a-f]{8})$")


def dir_name(step: int, token: int) -> str:
    return f"step-{step:010d}-{token & 0xFFFFFFFF:08x}"


def _format(raw: bytes | None) -> object:
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    return doc.get("format") if isinstance(doc, dict) else None


def parse_name(name: str) -> tuple[int, str] | None:
    """(step, token) of an attempt directory's name; None for anything else."""
    m = _NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


@dataclass(frozen=True, kw_only=True)
class Commit:
    """A complete checkpoint, as its marker describes it."""

    name: str
    path: str
    step: int
    committed_at: float  # unix seconds (rank 0's clock)
    world_size: int
    nbytes: int
    files: Mapping[str, str] = field(default_factory=dict)  # relative name -> sha256 hex


class Layout:
    """Attempt directories, commit markers and retention under one checkpoint root."""

    def __init__(self, store: Store, key: bytes | None = None) -> None:
        """`key`: the job's integrity key (`integrity`): a marker without its valid mac is not a commit."""
        self.store, self.key = store, key

    def path(self, name: str) -> str:
        return self.store.join(name)

    def attempts(self) -> list[str]:
        return sorted(n for n in self.store.names() if parse_name(n) is not None)

    def read_commit(self, name: str) -> Commit | None:
        """The commit of attempt `name`, or None when it is not (validly) committed."""
        parsed = parse_name(name)
        raw = self.store.read_small(self.store.join(name, MARKER)) if parsed else None
        if parsed is None or raw is None:
            return None
        try:
            doc = json.loads(raw)
            if doc.get("format") != FORMAT or doc.get("step") != parsed[0] or doc.get("token") != parsed[1] \
                    or not authentic(doc, self.key):
                return None
            files = doc["files"]
            if not isinstance(files, dict) or not files or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
                return None
            return Commit(
                name=name, path=self.path(name), step=parsed[0], committed_at=float(doc["committed_at"]),
                world_size=int(doc.get("world_size", 1)), nbytes=int(doc.get("bytes", 0)), files=dict(files),
            )  # fmt: skip
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def unverifiable(self) -> list[str]:
        """Attempts committed by an older vigil (a marker without digests): never restored, worth a warning."""
        return [n for n in self.attempts() if _format(self.store.read_small(self.store.join(n, MARKER))) == LEGACY]

    def forged(self) -> list[tuple[int, str]]:
        """(step, name) of the attempts whose marker is well formed but not made with the job's key: planted."""
        if self.key is None:
            return []
        out = []
        for name in self.attempts():
            raw = self.store.read_small(self.store.join(name, MARKER))
            parsed = parse_name(name)
            if parsed is not None and _format(raw) == FORMAT and self.read_commit(name) is None:
                out.append((parsed[0], name))
        return out

    def committed(self) -> list[Commit]:
        """Every complete checkpoint, newest first."""
        found = [c for n in self.attempts() if (c := self.read_commit(n)) is not None]
        return sorted(found, key=lambda c: (c.step, c.committed_at, c.name), reverse=True)

    def digests(self, name: str) -> dict[str, str]:
        """sha256 of every file of attempt `name` but its marker (and marker temporaries). Raises OSError."""
        path = self.path(name)
        return {f: self.store.sha256(self.store.join(name, *f.split("/")))
                for f in self.store.files(path) if not f.startswith(MARKER)}

    def verify(self, commit: Commit) -> str:
        """'' when the files of `commit` are exactly those its marker lists, with the same digests; else why not."""
        try:
            found = {f for f in self.store.files(commit.path) if not f.startswith(MARKER)}
            if missing := sorted(set(commit.files) - found):
                return f"{commit.name}: files missing: {', '.join(missing[:5])}"
            if extra := sorted(found - set(commit.files)):
                return f"{commit.name}: files not in the commit marker: {', '.join(extra[:5])}"
            for f, want in sorted(commit.files.items()):
                if self.store.sha256(self.store.join(commit.name, *f.split("/"))) != want:
                    return f"{commit.name}: sha256 of {f} does not match the commit marker"
        except OSError as exc:
            return f"{commit.name}: cannot verify: {type(exc).__name__}: {exc}"
        return ""

    def commit(self, name: str, *, world_size: int, nbytes: int) -> Commit:
        """Hash every file of attempt `name`, then write its marker (last, atomically). Raises OSError on failure."""
        parsed = parse_name(name)
        if parsed is None:
            raise ValueError(f"not an attempt directory name: {name!r}")
        files = self.digests(name)
        if not files:
            raise FileNotFoundError(f"attempt {name} holds no files to commit")
        now = time.time()
        doc = {
            "format": FORMAT, "step": parsed[0], "token": parsed[1], "committed_at": now,
            "committed_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "world_size": world_size, "bytes": nbytes, "files": files,
        }  # fmt: skip
        doc = seal(doc, self.key)
        self.store.write_atomic(self.store.join(name, MARKER), json.dumps(doc, sort_keys=True).encode())
        return Commit(name=name, path=self.path(name), step=parsed[0], committed_at=now, world_size=world_size,
                      nbytes=nbytes, files=files)  # fmt: skip

    def discard(self, name: str) -> bool:
        """Remove attempt `name`; False when it could not be removed (never raises)."""
        try:
            self.store.remove_tree(self.path(name))
            return True
        except (OSError, ValueError):
            return False

    def prune(self, keep: int | None, *, protect: str) -> list[str]:
        """Remove incomplete attempts and complete checkpoints beyond the newest `keep`.

        `protect` (the attempt just committed) is never removed, nor any complete checkpoint
        of a higher step than it. Returns the names removed.
        """
        complete = self.committed()
        ceiling = parsed[0] if (parsed := parse_name(protect)) else -1
        kept = {c.name for c in (complete if keep is None else complete[:keep])} | {protect}
        kept |= {c.name for c in complete if c.step > ceiling}
        removed = [n for n in self.attempts() if n not in kept and self.discard(n)]
        return removed
