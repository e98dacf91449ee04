"""The error tree drawn in vigil/errors.py is the tree of the classes: every VigilError subclass, its parent."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import vigil
import vigil.errors
from vigil.errors import VigilError

RUN_BY_PATH = ("warmchild", "warmlaunch", "__main__")  # not importable as modules of the package


def _all() -> list[tuple[str, str, str]]:
    """(name, module, parent's name) of every VigilError subclass defined in vigil."""
    found: list[tuple[str, str, str]] = []
    for info in pkgutil.walk_packages(vigil.__path__, "vigil."):
        if info.name.rsplit(".", 1)[-1] in RUN_BY_PATH:
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, VigilError) and cls.__module__ == info.name and cls is not VigilError:
                parent = next(b for b in cls.__mro__[1:] if issubclass(b, VigilError))
                found.append((name, info.name, parent.__name__))
    return found


def _classes() -> dict[str, str]:
    return {name: parent for name, _module, parent in _all()}


def _drawn() -> dict[str, str]:
    drawn: dict[str, str] = {}
    stack: list[tuple[int, str]] = [(-1, "VigilError")]
    for line in (vigil.errors.__doc__ or "").splitlines():
        m = re.match(r"^\s*((?:│   |    )*)[├└]── (\w+)", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4
        while stack[-1][0] >= depth:
            stack.pop()
        drawn[m.group(2)] = stack[-1][1]
        stack.append((depth, m.group(2)))
    return drawn


@pytest.mark.pure
def test_the_drawn_error_tree_is_the_real_one() -> None:
    real, drawn = _classes(), _drawn()
    assert len(real) >= 17
    assert drawn == real, f"vigil/errors.py's tree is stale: drawn only {set(drawn) - set(real)}, " \
                          f"missing {set(real) - set(drawn)}, other parent {[k for k in real if drawn.get(k, real[k]) != real[k]]}"


@pytest.mark.pure
def test_no_two_errors_share_a_name() -> None:
    names = [f"{name} ({module})" for name, module, _ in _all()]
    assert len({n.split()[0] for n in names}) == len(names), sorted(names)
