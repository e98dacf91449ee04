"""`python -m vigil.app.reference [--check]`: write (or check) the generated pages under docs/ and README.md's
generated block (the metrics' names)."""

from __future__ import annotations

import sys
from pathlib import Path

from vigil.app.reference import metrics, settings, tables

DOCS = Path(__file__).resolve().parents[3] / "docs"
PAGES = {"settings.md": settings.page, "tables.md": tables.page, "metrics.md": metrics.page}
README = DOCS.parent / "README.md"


def main(argv: list[str]) -> int:
    stale = []
    for name, render in PAGES.items():
        text = render()
        path = DOCS / name
        if "--check" in argv:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    text = README.read_text(encoding="utf-8")
    if (fresh := metrics.readme(text)) != text:
        if "--check" in argv:
            stale.append(README.name)
        else:
            README.write_text(fresh, encoding="utf-8")
            print(f"wrote {README}")
    if stale:
        names = ", ".join(n if n == README.name else f"docs/{n}" for n in stale)
        print(f"stale: {names} (run `python -m vigil.app.reference`)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
