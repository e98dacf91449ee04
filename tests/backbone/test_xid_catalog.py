"""The Xid catalog: the shipped table parses, its codes are unique, its values are members of the closed enums."""

from __future__ import annotations

import pytest

from vigil.contract.xid import (
    XidAction,
    XidCause,
    catalog,
    decides,
    parse_catalog,
    xid_entry,
)

pytestmark = pytest.mark.pure

REQUIRED = {13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143,
            *range(144, 151)}


def test_the_shipped_table_covers_the_documented_codes() -> None:
    table = catalog()
    assert set(table) >= REQUIRED
    for entry in table.values():
        assert isinstance(entry.cause, XidCause) and isinstance(entry.action, XidAction)
        assert entry.name and entry.severity in ("info", "warning", "error", "critical")


def test_application_memory_and_hardware_classes() -> None:
    assert {xid_entry(c).action for c in (13, 31, 43)} == {XidAction.RESTART_JOB}
    assert not any(xid_entry(c).host_fault for c in (13, 31, 43, 92))
    assert {xid_entry(c).cause for c in (48, 63, 64, 94, 95)} == {XidCause.MEMORY}
    assert xid_entry(48).action is XidAction.RESET_GPU and xid_entry(48).host_fault
    assert xid_entry(79).action is XidAction.REBOOT_THEN_CHECK and xid_entry(79).severity == "critical"
    assert xid_entry(92).action is XidAction.WATCH and xid_entry(92).severity == "warning"
    assert xid_entry(119).cause is XidCause.GSP and xid_entry(74).cause is XidCause.NVLINK


def test_an_unknown_code_is_hardware_investigate() -> None:
    e = xid_entry(9999)
    assert (e.cause, e.action, e.severity, e.known) == (XidCause.HARDWARE, XidAction.INVESTIGATE, "critical", False)
    assert e.host_fault


def test_only_the_hardware_s_own_reports_decide() -> None:
    assert decides("kernel") and decides("nvml") and decides("sysfs")
    assert not decides("process") and not decides("")


HEAD = "code,name,cause,action,severity,note\n"


@pytest.mark.parametrize(("rows", "problem"), [
    ("13,a,application,restart_job,error,\n13,b,application,restart_job,error,\n", "duplicate"),
    ("13,a,application,pray,error,\n", "pray"),
    ("13,a,cosmic_rays,watch,error,\n", "cosmic_rays"),
    ("13,a,application,watch,fatal,\n", "fatal"),
    ("x,a,application,watch,error,\n", "x"),
])
def test_a_bad_row_is_refused_with_its_line(rows: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"line [23].*{problem}"):
        parse_catalog(HEAD + rows)


def test_wrong_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="columns"):
        parse_catalog("code,name\n13,a\n")
