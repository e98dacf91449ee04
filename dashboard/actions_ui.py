"""The Recovery page's buttons in the browser: click -> confirmation dialog -> `Actions.perform` on the server.

    show_bar   the action bar (token, name, reason, result) is shown on /recovery only
    ask        a click on a `{"type": "rec-act", ...}` button remembers the request and opens the dialog
    confirmed  the dialog's OK sends the request with the bar's token, name and reason; the answer
               (published, or refused and why) is shown in the bar

The checks are `Actions.perform`'s, on the server: a hidden or disabled button is a convenience,
not the protection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flask
from dash import ALL, Dash, Input, Output, State, ctx, no_update

from vigil.dashboard.actions import ACTIONS, ActionRefused, ActionRequest, Actions
from vigil.errors import VigilError, one_line

_WHAT = {"cordon": "Cordon {target} (no new work; its agent stops the job there)",
         "uncordon": "Put {target} back in service", "evict": "Evict job {job}'s processes/pods from {target}",
         "approve": "Approve recovery {target} (the controller goes on)"}


def confirm_message(pending: dict[str, Any]) -> str:
    what = _WHAT.get(str(pending.get("action")), "{action} {target}").format(**pending)
    return f"{what}?\n\nThis is published as a recovery event with your name and reason."


def submit(actions: Actions, pending: dict[str, Any] | None, token: str | None, name: str | None,
           reason: str | None, headers: Mapping[str, str] | None = None) -> str:
    """Perform the confirmed request; the line shown to the operator."""
    if not pending or pending.get("action") not in ACTIONS:
        return "refused: no action to confirm"
    req = ActionRequest(action=pending["action"], job_id=str(pending.get("job") or ""),
                        target=str(pending.get("target") or ""))
    try:
        event = actions.perform(req, token=token, reason=reason or "", who=name or "", headers=headers)
    except ActionRefused as exc:
        return f"refused: {exc}"
    except VigilError as exc:
        return f"not published: {one_line(exc)}"
    return f"{req.action} {req.target}: published ({event.command_id or event.incident_id}) by {event.actor}"


def register(app: Dash, actions: Actions) -> None:
    @app.callback(Output("action-bar", "hidden"), Input("url", "pathname"))
    def show_bar(path: str | None) -> bool:
        return (path or "").rstrip("/") != "/recovery"

    @app.callback(Output("rec-pending", "data"), Output("rec-confirm", "displayed"), Output("rec-confirm", "message"),
                  Input({"type": "rec-act", "action": ALL, "target": ALL, "job": ALL}, "n_clicks"),
                  prevent_initial_call=True)
    def ask(_clicks: list[Any]) -> tuple[Any, Any, Any]:
        trig = ctx.triggered_id
        if not isinstance(trig, dict) or not ctx.triggered or not ctx.triggered[0].get("value"):
            return no_update, no_update, no_update  # a refresh re-created the buttons: no click
        pending = {k: str(trig[k]) for k in ("action", "target", "job")}
        return pending, True, confirm_message(pending)

    @app.callback(Output("rec-result", "children"), Input("rec-confirm", "submit_n_clicks"),
                  State("rec-pending", "data"), State("rec-token", "value"), State("rec-name", "value"),
                  State("rec-reason", "value"), prevent_initial_call=True)
    def confirmed(_n: int | None, pending: dict[str, Any] | None, token: str | None, name: str | None,
                  reason: str | None) -> str:
        return submit(actions, pending, token, name, reason, headers=dict(flask.request.headers))
