"""torchrun command lines: recognise them and make every worker's output attributable to its rank.

`vigil run -- torchrun ... train.py` (or `python -m torch.distributed.run ...`) gets
`--log-dir <output>/torchelastic` unless it has one (each worker's `error.json` from
`@record` lands there, named in torchrun's failure report) and `--tee 3` unless it tees or
redirects already (every console line of a worker is then prefixed `[default<local_rank>]:`).
With `--redirects` the console carries no worker output, so the agent tails the log
directory's per-rank files instead (`Attributed.redirected`). Older run directories under the
injected log directory are pruned to the newest `KEEP_RUNS`. Pure logic, but for the pruning.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun options that take no value (checked against torch's own parser in the tests)
FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module",
                   "--virtual-local-rank", "--virtual_local_rank", "-h", "--help"})
KEEP_RUNS = 3
_SHORT = {"-t": "--tee", "-r": "--redirects"}


def _norm(name: str) -> str:
    name = _SHORT.get(name, name)
    return name.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class Options:
    """Where torchrun's own options are in an argv: tokens [start, end), and each option's span."""

    start: int
    end: int
    spans: list[tuple[str, int, int]]  # normalised long name, first token, end token


def scan(argv: Sequence[str]) -> Options | None:
    """torchrun's options in `argv`, or None when `argv` does not run torchrun."""
    start = None
    for i, tok in enumerate(argv):
        if Path(tok).name == "torchrun":
            start = i + 1
            break
        if tok == "-m" and i + 1 < len(argv) and argv[i + 1] in MODULES:
            start = i + 2
            break
    if start is None:
        return None
    spans: list[tuple[str, int, int]] = []
    i = start
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        tok = argv[i]
        if tok.startswith("--") and "=" in tok:
            spans.append((_norm(tok.split("=", 1)[0]), i, i + 1))
            i += 1
        elif tok in FLAGS or (tok.startswith("-") and not tok.startswith("--") and len(tok) > 2):
            spans.append((_norm(tok[:2] if not tok.startswith("--") else tok), i, i + 1))
            i += 1
        else:
            spans.append((_norm(tok), i, min(i + 2, len(argv))))
            i += 2
    return Options(start=start, end=min(i, len(argv)), spans=spans)


@dataclass(frozen=True, kw_only=True)
class TorchrunArgs:
    at: int  # index of the first torchrun option in argv
    options: dict[str, str]  # normalised long name -> value, for the options given before the script


def parse(argv: Sequence[str]) -> TorchrunArgs | None:
    """torchrun's own options in `argv` with their values, or None when `argv` does not run torchrun."""
    opts = scan(argv)
    if opts is None:
        return None
    options: dict[str, str] = {}
    for name, first, end in opts.spans:
        tok = argv[first]
        if tok.startswith("--") and "=" in tok:
            options[name] = tok.split("=", 1)[1]
        elif end - first == 2:
            options[name] = argv[first + 1]
        elif not tok.startswith("--") and tok not in FLAGS and len(tok) > 2:
            options[name] = tok[2:]  # -t3
        else:
            options[name] = ""
    return TorchrunArgs(at=opts.start, options=options)


def nproc_per_node(argv: Sequence[str]) -> int:
    """torchrun's workers per node in `argv` (`--nproc-per-node N`); 1 when not torchrun or not a number."""
    args = parse(argv)
    value = args.options.get("--nproc-per-node", "1") if args is not None else "1"
    return int(value) if value.isdigit() and int(value) > 0 else 1


@dataclass(frozen=True, kw_only=True)
class Attributed:
    argv: list[str]
    log_dir: Path | None  # where torchrun writes per-rank files (None: not torchrun)
    injected: bool  # the log directory is ours (prunable)
    redirected: bool  # worker output goes to the files only: tail them


def with_attribution(argv: Sequence[str], log_dir: Path) -> Attributed:
    """`argv` with --log-dir / --tee added where missing, and where torchrun's per-rank files will be."""
    args = parse(argv)
    if args is None:
        return Attributed(argv=list(argv), log_dir=None, injected=False, redirected=False)
    extra: list[str] = []
    chosen = args.options.get("--log-dir")
    if not chosen:
        extra += ["--log-dir", str(log_dir)]
    redirected = bool(args.options.get("--redirects"))
    if "--tee" not in args.options and not redirected:
        extra += ["--tee", "3"]
    return Attributed(argv=[*argv[:args.at], *extra, *argv[args.at:]], log_dir=Path(chosen) if chosen else log_dir,
                      injected=not chosen, redirected=redirected)


def prune_runs(log_dir: Path, keep: int = KEEP_RUNS) -> None:
    """Keep the newest `keep` run directories torchrun made under `log_dir` (never raises)."""
    try:
        runs = sorted((p for p in log_dir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in runs[:-keep] if keep > 0 else runs:
        shutil.rmtree(old, ignore_errors=True)
        log.info("pruned old torchrun log directory %s", old)
