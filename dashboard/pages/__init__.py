"""One module per page; each exposes `render(view: PageView) -> component` (see pages.base)."""
