"""Recovery step names are a closed StrEnum (`RecoveryStep`), and the controller's plans and handlers use only them."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import get_args

import pytest

from vigil.contract.decisions import RecoveryStep
from vigil.recovery.controller.engine import HANDLERS
from vigil.recovery.controller.plan import steps_for
from vigil.recovery.settings import Mode, PolicySettings

pytestmark = pytest.mark.pure
ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("start", "scale", "hardware", "hang", "software")


def test_every_handler_is_a_step_and_every_planned_step_has_a_handler() -> None:
    members = {s.value for s in RecoveryStep}
    assert set(HANDLERS) <= members
    planned: set[str] = set()
    for cls, mode, crash, explicit, hw, hang in itertools.product(CLASSES, get_args(Mode), *[(False, True)] * 4):
        policy = PolicySettings(diagnose_hardware=hw, diagnose_hang=hang)
        planned |= set(steps_for(cls, mode, policy, crash_loop=crash, explicit=explicit))
    assert planned <= set(HANDLERS), f"planned without a handler: {planned - set(HANDLERS)}"
    assert planned <= members


def test_every_step_is_taken_or_reported_by_the_product() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for top in ("recovery", "vigil/app", "dashboard")
                        for p in (ROOT / top).rglob("*.py"))
    unused = [s.value for s in RecoveryStep if not re.search(rf"[\"']{s.value}[\"']", sources)]
    assert not unused, f"steps nothing takes or reports: {unused}"
