"""A pre-warmed training interpreter: torch imported, waiting for the order to run the entry point.

Run by path (`python -u .../warmchild.py MODULE ...`, never as `-m vigil...`), so nothing of vigil is
imported: only the standard library, then the modules named on its command line (torch and its
heavy parts by default; `collector.settings.warm_imports`). A module that fails to import is
skipped: it is imported again, cold, by the entry point, with the error a cold start would show.

Then it blocks on one JSON line on stdin, the order of `collector.warmlaunch`:
`{"env": {...}, "cwd": "...", "script": PATH | null, "module": NAME | null, "args": [...]}`. It
takes that environment (the whole of it: what it was started with is dropped), directory, argv and
`sys.path[0]` as `python -u SCRIPT ARGS` / `python -u -m MODULE ARGS` would have them, closes its
stdin and runs the entry point as `__main__` (`runpy`). From there it is the training process:
its exit status, signals, tracebacks and output are the entry point's. EOF instead of an order
(its launcher gone) ends it with status 0, having run nothing. Standard library (+ the named
imports) only: it holds no credential and imports no platform module.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # the collector's folder: its modules must not shadow the job's

import importlib
import json
import runpy


def warm(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            continue


def run(order: dict[str, object]) -> None:
    env, args = order["env"], order["args"]
    assert isinstance(env, dict) and isinstance(args, list)
    cwd = str(order["cwd"])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    script, module = order.get("script"), order.get("module")
    if script:
        path = os.path.abspath(str(script))
        sys.argv = [str(script), *map(str, args)]
        sys.path.insert(0, os.path.dirname(path))
        runpy.run_path(path, run_name="__main__")
    else:
        sys.argv = [str(module), *map(str, args)]
        sys.path.insert(0, cwd)
        runpy.run_module(str(module), run_name="__main__", alter_sys=True)


def main() -> None:
    warm(sys.argv[1:])
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    run(json.loads(line))


if __name__ == "__main__":
    main()
