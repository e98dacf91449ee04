"""Reading the API server's refusals: its Status body, its message, and how long it asks to wait."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from vigil.errors import one_line


def status_body(exc: ApiException) -> dict[str, Any]:
    try:
        doc = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def api_message(exc: ApiException) -> str:
    """The API server's own words: the Status message and its causes, else the body's first line."""
    doc = status_body(exc)
    causes = [c.get("message", "") for c in (doc.get("details") or {}).get("causes") or [] if isinstance(c, dict)]
    text = "; ".join(filter(None, [doc.get("message", ""), *causes])) or str(exc.body or "").strip()
    return one_line(Exception(text), limit=500) if text else "(no message)"


def retry_after(exc: ApiException) -> float:
    try:
        header = (exc.headers or {}).get("Retry-After")
        if header:
            return float(header)
        return float((status_body(exc).get("details") or {}).get("retryAfterSeconds") or 0)
    except (TypeError, ValueError):
        return 0.0
