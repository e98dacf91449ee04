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
its exit status, signals, tracebacks and output are the entry point's. When the entry point is done it
ends as the interpreter would (non-daemon threads joined, atexit handlers run, files left open and
stdio flushed), then
leaves with `os._exit`: the C++ static destructors of torch, imported before the order, are skipped
(a torch thread still joinable then aborts the process, "terminate called without an active
exception", turning a rank that succeeded into a failure). EOF instead of an order
(its launcher gone) ends it with status 0, having run nothing. Standard library (+ the named
imports) only: it holds no credential and imports no platform module.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # the collector's folder: its modules must not shadow the job's

import atexit
import gc
import importlib
import io
import json
import runpy
import signal
import threading
from typing import NoReturn


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


def status_of(code: object) -> int:
    """The exit status `sys.exit(code)` gives (None: 0; an int, mod 256; anything else printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(status: int, *, interrupted: bool = False) -> NoReturn:
    """End as the interpreter's shutdown would, without its C++ teardown (see the module docstring)."""
    main_thread = threading.main_thread()
    for t in threading.enumerate():
        if t is not main_thread and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    # what the interpreter's teardown would write: files the entry point left open (their buffers are
    # flushed when collected at a normal exit), then stdout and stderr
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase) and obj not in (sys.stdout, sys.stderr):
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except Exception:
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if interrupted:  # as CPython ends on an uncaught KeyboardInterrupt: killed by the SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def main() -> None:
    warm(sys.argv[1:])
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    try:
        run(json.loads(line))
    except SystemExit as exc:
        finish(status_of(exc.code))
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        finish(1, interrupted=True)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the entry point's hook, when it set one, as at a cold exit
        finish(1)
    finish(0)


if __name__ == "__main__":
    main()
