"""Whether `make demo` can run its training job as a separate uid, and the note that says why not.

The job is untrusted code; `vigil run --user` starts it as another uid than the agent that holds the
host's key (`vigil.collector.principal`). The demo does so where the machine allows: it runs as root
(changing uid needs it), the job uid (`JOB_USER`, "nobody") exists, and that uid can reach what the job
reads: the interpreter and the venv's packages, the vigil sources (the training script imports the
checkpointer) and the demo's own folder under VIGIL_HOME. A path under a directory closed to other uids
(a venv under a 0700 home) makes it fall back to the caller's uid, with a printed note naming it. Pure:
the caller passes its effective uid and the paths; only `stat` and the passwd database are read.
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

JOB_USER = "nobody"


@dataclass(frozen=True, kw_only=True)
class JobIdentity:
    user: str | None  # `vigil run --user` for the job; None: the caller's own uid
    note: str  # one line for the demo's output


def closed(path: Path) -> Path | None:
    """The first directory on the way to `path` that another uid cannot search, or `path` itself when it cannot
    read it (a directory: list and search); None when another uid can read it (by the "other" mode bits)."""
    path = path.resolve()
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return parent
    mode = os.stat(path).st_mode
    need = stat.S_IROTH | stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
    return None if mode & need == need else path


def job_reads(repo: Path, train: Path) -> list[Path]:
    """What the demo's training job reads: the interpreter, the venv's packages, the sources, the script."""
    return [Path(sys.executable), Path(sysconfig.get_paths()["purelib"]), repo, train]


def job_identity(*, euid: int, reads: Iterable[Path], platform: str = sys.platform) -> JobIdentity:
    """`--user` for the demo's job where the machine allows, else None with the reason (see the module)."""
    if not platform.startswith("linux") or euid != 0:
        return JobIdentity(user=None, note="the job runs as your uid: run `make demo` as root to run it as a "
                                           f"separate uid ({JOB_USER}), apart from the agents that hold the keys")
    try:
        pwd.getpwnam(JOB_USER)
    except KeyError:
        return JobIdentity(user=None, note=f"the job runs as root's uid: there is no user {JOB_USER!r} to run it as")
    for path in reads:
        try:
            shut = closed(path)
        except OSError as exc:
            return JobIdentity(user=None, note=f"the job runs as root's uid: cannot check {path}: {exc}")
        if shut is not None:
            mode = stat.S_IMODE(os.stat(shut).st_mode)
            return JobIdentity(user=None, note=f"the job runs as root's uid: {shut} (mode {mode:04o}) hides {path} "
                                               f"from {JOB_USER}; open it (chmod o+rx) or put the venv elsewhere")
    return JobIdentity(user=JOB_USER, note=f"the job runs as {JOB_USER}, apart from the agents that hold the keys")
