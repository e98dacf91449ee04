"""A pre-warmed training interpreter: torch imported, waiting for the order to run the entry point.

Run by path (`python -u .../warmchild.py MODULE ...`, never as `-m vigil...`), so nothing of vigil is
imported: only the standard library, then the modules named on its command line (torch and its
heavy parts by default; `collector.settings.warm_imports`). A module that fails to import is
skipped: it is imported again, cold, by the entry point, with the error a cold start would show.

Then it blocks on one JSON line on stdin, the order of `collector.control.warmlaunch`:
`{"env": {...}, "cwd": "...", "script": PATH | null, "module": NAME | null, "args": [...]}`. It
takes that environment (the whole of it: what it was started with is dropped), directory, argv and
`sys.path[0]` as `python -u SCRIPT ARGS` / `python -u -m MODULE ARGS` would have them, closes its
stdin and runs the entry point in a new `__main__` module (`-m`: runpy's own path for it). From
there it is the training process: its exit status, signals, tracebacks and output are the entry
point's. When the entry point is done it ends as the interpreter would (threads joined, exit hooks
and atexit handlers run, files left open closed, stdio flushed: `finish`), then leaves with
`os._exit`: the C++ static destructors of torch, imported before the order, are skipped (a torch
thread still joinable then aborts the process, "terminate called without an active exception",
turning a rank that succeeded into a failure). EOF instead of an order
(its launcher gone) ends it with status 0, having run nothing. Standard library (+ the named
imports) only: it holds no credential and imports no platform module.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # the collector's folder: its modules must not shadow the job's

import atexit
import builtins
import gc
import importlib
import io
import json
import runpy
import signal
import threading
import types
from typing import NoReturn


def dumpable(on: bool) -> None:
    """prctl(PR_SET_DUMPABLE): off while it waits for its order, so no other process of its uid reads or writes
    it through /proc or ptrace (`collector.principal`); Linux only, best effort."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(4, int(on), 0, 0, 0)
        except (OSError, AttributeError):
            pass


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
    main = types.ModuleType("__main__")  # a new __main__ (this file's own namespace stays out), kept in
    main.__dict__["__builtins__"] = builtins  # sys.modules to the end, as `python SCRIPT` / `-m` keep it
    sys.modules["__main__"] = main
    if script:
        path = os.path.abspath(str(script))
        sys.argv = [str(script), *map(str, args)]
        sys.path.insert(0, os.path.dirname(path))
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec")
        main.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None)
        exec(code, main.__dict__)
    else:
        sys.argv = [str(module), *map(str, args)]
        sys.path.insert(0, cwd)
        runpy._run_module_as_main(str(module), alter_argv=True)  # type: ignore[attr-defined]  # what -m runs


def clear_main() -> None:
    """Clear `__main__`'s namespace as the interpreter's finalisation does (names with one leading underscore
    first, then the rest but `__builtins__`, each set to None in order): objects die by reference count in that
    order (a text wrapper before the gzip file under it), not as a garbage cycle in any order."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", None)
    if not isinstance(namespace, dict):
        return
    for first in (True, False):
        for name in list(namespace):
            single = isinstance(name, str) and name[:1] == "_" and name[1:2] != "_"
            if (single if first else name != "__builtins__"):
                try:
                    namespace[name] = None
                except Exception:
                    pass


def status_of(code: object) -> int:
    """The exit status `sys.exit(code)` gives (None: 0; an int, mod 256; anything else printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    if sys.stderr is not None:
        print(code, file=sys.stderr)
    return 1


def finish(status: int, *, interrupted: bool = False) -> NoReturn:
    """End as the interpreter's shutdown would, without its C++ teardown (see the module docstring): the
    non-daemon threads joined and the threading exit hooks run (`concurrent.futures` wakes its workers
    there), the atexit handlers, what became unreachable finalised, the files still open closed (a gzip
    or zip writer ends its stream on close), stdout and stderr flushed (a failed flush: status 120)."""
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first at exit
    atexit._run_exitfuncs()
    clear_main()
    gc.collect()
    std = [s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.stdin, sys.__stdin__) if s]
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            status = 120
    close_outermost_first([obj for obj in gc.get_objects() if isinstance(obj, io.IOBase) and not any(
        obj is s for s in std)])
    if interrupted:  # as CPython ends on an uncaught KeyboardInterrupt: killed by the SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def close_outermost_first(files: list[io.IOBase]) -> None:
    """Close `files`, each before the file it writes into (a text wrapper before its buffer, a gzip writer
    before its file): closing the inner one first would drop what the outer one still holds."""

    def still_open(f: io.IOBase) -> bool:
        try:
            return not f.closed
        except Exception:
            return False

    left = [f for f in files if still_open(f)]
    while left:
        inner = {id(getattr(f, name, None)) for f in left for name in ("buffer", "raw", "fileobj")}
        outer = [f for f in left if id(f) not in inner] or left  # a cycle: all at once
        for f in outer:
            try:
                f.close()
            except Exception:
                pass
        left = [f for f in left if not any(f is o for o in outer) and still_open(f)]


def main() -> None:
    dumpable(False)
    warm(sys.argv[1:])
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    dumpable(True)  # from here on it is the training process, of the training uid
    status, interrupted = 0, False
    try:
        run(json.loads(line))
    except SystemExit as exc:
        status = status_of(exc.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        status, interrupted = 1, True
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the entry point's hook, when it set one, as at a cold exit
        status = 1
    finish(status, interrupted=interrupted)  # outside the handlers: the traceback no longer holds the frames


if __name__ == "__main__":
    main()
