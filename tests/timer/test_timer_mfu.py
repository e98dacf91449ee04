"""Achieved TFLOP/s and MFU: computation, peak table, environment overrides."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import vigil.timer.mfu
from tests.timer.timer_testutil import read_records, timer_config
from vigil.timer import StepTimer, peak_for_device
from vigil.timer.mfu import resolve_flops, resolve_peak, throughput

pytestmark = pytest.mark.pure


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIGIL_FLOPS_PER_STEP", raising=False)
    monkeypatch.delenv("VIGIL_GPU_PEAK_TFLOPS", raising=False)


def test_throughput_formula() -> None:
    tflops, mfu = throughput(4e14, 1000.0, 989.0)  # 400 TFLOP in one second on an H100
    assert tflops == pytest.approx(400.0)
    assert mfu == pytest.approx(400.0 / 989.0)
    assert throughput(None, 10.0, 989.0) == (None, None)
    tflops, mfu = throughput(1e12, 10.0, None)
    assert tflops == pytest.approx(100.0) and mfu is None
    # an impossible MFU means the FLOPs or the peak are wrong: no mfu rather than a false one
    assert throughput(1e15, 100.0, 989.0)[1] is None


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA A800 80GB PCIe", 312.0),
        ("NVIDIA L40S", 362.0),
        ("Tesla V100-SXM2-32GB", 125.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA GB200", 2500.0),
        ("AMD Instinct MI300X", 1307.0),
        ("NVIDIA GeForce GTX 1080", None),
    ],
)
def test_peak_table_by_device_name(name: str, peak: float | None) -> None:
    assert peak_for_device(name) == peak


def test_peak_table_entries_added_at_run_time_count(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setitem(vigil.timer.mfu.PEAK_BF16_TFLOPS, "RTX 4090", 165.0)
    assert peak_for_device("NVIDIA GeForce RTX 4090") == 165.0


def test_peak_and_flops_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_peak(None, "NVIDIA H100 80GB HBM3") == 989.0
    monkeypatch.setenv("VIGIL_GPU_PEAK_TFLOPS", "500")
    assert resolve_peak(None, "NVIDIA H100 80GB HBM3") == 500.0
    assert resolve_peak(123.0, "NVIDIA H100 80GB HBM3") == 123.0
    assert resolve_flops(None) is None
    monkeypatch.setenv("VIGIL_FLOPS_PER_STEP", "2.5e12")
    assert resolve_flops(None) == 2.5e12
    assert resolve_flops(1e9) == 1e9


def test_records_carry_tflops_and_mfu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_FLOPS_PER_STEP", "1e12")
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", gpu_peak_tflops=50.0, job_id="j", host="h"))
    with t.step():
        time.sleep(0.05)
    with t.step(flops=2e12):  # per-step override
        time.sleep(0.05)
    t.close()
    first, second = read_records(tmp_path)
    for rec, flops in ((first, 1e12), (second, 2e12)):
        expected = flops / (rec["step_ms"] / 1e3) / 1e12
        assert rec["tflops"] == pytest.approx(expected, rel=1e-3)
        assert rec["mfu"] == pytest.approx(expected / 50.0, rel=1e-3)
        assert rec["tflops"] <= flops / 0.05 / 1e12  # the step took at least the sleep


def test_no_flops_no_throughput(tmp_path: Path) -> None:
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", gpu_peak_tflops=50.0, job_id="j", host="h"))
    with t.step():
        pass
    t.close()
    rec = read_records(tmp_path)[0]
    assert rec["tflops"] is None and rec["mfu"] is None
