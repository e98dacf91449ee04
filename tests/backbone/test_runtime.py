"""The hosting processes' collector settings (vigil/runtime.py), in a process of their own: tests keep Python's."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc, weakref
from vigil.runtime import YOUNG, tune_gc

class Node:
    pass

tune_gc()
assert gc.isenabled() and gc.get_threshold() == (YOUNG, 10, 10), gc.get_threshold()
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # start-up's objects: out of every collection
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after: garbage the collector must still find on its own
gone = weakref.ref(a)
del a, b
keep = [[] for _ in range(YOUNG // 2)]  # fewer allocations than the threshold: no collection yet
assert gone() is not None
more = [[] for _ in range(YOUNG)]  # past it: a young collection ran
assert gone() is None
print("ok")
"""


def test_tune_gc_freezes_start_up_and_still_collects_cycles_made_after() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
