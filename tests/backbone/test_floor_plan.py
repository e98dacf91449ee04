"""The house's floor plan: which folder holds which tier, and the import-linter contracts that say so stay whole.

The node-telemetry contract names the collector's root modules one by one (import-linter has no "every sibling but
one" form); this test fails when a module is added at collector/'s root without being put under that contract. Likewise
the trainside contract names every other package of vigil/: the training side's leaf must stay stdlib-only.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _contract(cid: str) -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == cid]
    return contract


@pytest.mark.pure
def test_every_telemetry_module_is_under_the_node_telemetry_contract() -> None:
    on_disk = {f"vigil.collector.{p.stem}" for p in (ROOT / "collector").glob("*.py") if p.stem != "__init__"}
    listed = set(_contract("node-telemetry")["source_modules"])  # type: ignore[arg-type]
    assert on_disk == listed, f"add to (or drop from) pyproject's node-telemetry contract: {on_disk ^ listed}"


@pytest.mark.pure
def test_every_component_is_a_layer_peer() -> None:
    layers = _contract("layers")["layers"]
    peers = {m.strip() for m in layers[1].split("|")}  # type: ignore[index]
    linked = {f"vigil.{p.name}" for p in (ROOT / "vigil").iterdir() if p.is_symlink()}
    assert linked <= peers, f"component folders missing from the layers contract: {linked - peers}"
    assert not (ROOT / "dashboard" / "notify").exists(), "the notifier is its own component (notify/)"


@pytest.mark.pure
def test_the_house_has_no_import_circle() -> None:
    import grimp

    graph = grimp.build_graph("vigil", cache_dir=None, exclude_type_checking_imports=True)  # typing is no circle
    modules = sorted(graph.modules)
    # Tarjan-free: a module is in a circle when it can reach itself through what it imports (lazy imports count)
    circles = []
    for m in modules:
        for imported in graph.find_modules_directly_imported_by(m):
            if imported == m or m.startswith(imported + ".") or imported.startswith(m + "."):
                continue  # a package and its own module (an __init__ re-exporting it): not a circle between modules
            if graph.chain_exists(importer=imported, imported=m):
                circles.append(f"{m} <-> {imported}")
    assert not circles, "import circles: " + "; ".join(sorted(circles)[:10])


def _names(cid: str, key: str) -> set[str]:
    value = _contract(cid)[key]
    assert isinstance(value, list)
    return {str(m) for m in value}


@pytest.mark.pure
def test_the_training_sides_leaf_is_a_stdlib_only_kernel_package() -> None:
    leaf = ROOT / "vigil" / "trainside"
    assert leaf.is_dir() and not leaf.is_symlink(), "vigil/trainside is part of the kernel, not a component"
    siblings = {f"vigil.{p.stem}" for p in (ROOT / "vigil").iterdir()
                if p.name not in ("trainside", "__init__.py", "__main__.py", "__pycache__")}
    assert _names("trainside", "source_modules") == {"vigil.trainside"}
    forbidden = _names("trainside", "forbidden_modules")
    assert siblings <= forbidden, f"add to pyproject's trainside contract: {siblings - forbidden}"
    assert {"torch"} | _names("training-side", "forbidden_modules") <= forbidden
    assert "vigil.trainside" not in _names("training-side", "forbidden_modules")
    bottom = _contract("layers")["layers"][-1]  # type: ignore[index]
    assert "vigil.trainside" in {m.strip() for m in str(bottom).split("|")}, "the leaf sits in the kernel's bottom"
