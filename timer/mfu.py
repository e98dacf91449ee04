"""Achieved TFLOP/s and model FLOPs utilisation (MFU) of a step.

``tflops = flops_per_step / step_seconds / 1e12`` where `flops_per_step` is the model
FLOPs one rank performs in one step (e.g. ``6 * params * tokens_per_rank`` for a dense
transformer, plus attention), and ``mfu = tflops / peak``.

The FLOPs come from the `flops_per_step` argument (or a per-step override), else the
`VIGIL_FLOPS_PER_STEP` environment variable. The peak comes from the `gpu_peak_tflops`
argument, else `VIGIL_GPU_PEAK_TFLOPS`, else the table below matched against the CUDA
device name. Values are dense (no sparsity) BF16 tensor-core peaks from vendor data
sheets (FP16 for V100, which has no BF16); clocks, power caps and SKUs vary, so set the
peak explicitly when you know better.
"""

from __future__ import annotations

from vigil.trainside import env

# Substring of torch.cuda.get_device_name() -> dense BF16 TFLOP/s. Matched
# case-insensitively, longest key first, so "GB200" wins over "B200" and "A100" over "A10".
PEAK_BF16_TFLOPS: dict[str, float] = {
    "GB300": 2500.0,
    "B300": 2250.0,
    "GB200": 2500.0,
    "B200": 2250.0,
    "B100": 1750.0,
    "H200 NVL": 835.0,
    "H200": 989.0,
    "GH200": 989.0,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H800 PCIe": 756.0,
    "H800": 989.0,
    "H20": 148.0,
    "A100": 312.0,
    "A800": 312.0,
    "A30": 165.0,
    "A10G": 70.0,
    "A10": 125.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "V100": 125.0,
    "MI355X": 2500.0,
    "MI325X": 1307.0,
    "MI300X": 1307.0,
    "MI250X": 383.0,
}

# mfu above this is rejected by the event contract (StepTiming.mfu <= 1.5): it means the
# peak or the FLOPs are wrong, so the record carries no mfu rather than a false one.
MAX_PLAUSIBLE_MFU = 1.5

def peak_for_device(device_name: str) -> float | None:
    """Dense BF16 peak TFLOP/s of a device by name, or None when it is not in the table.

    The longest matching name wins ("H100 NVL" before "H100"); entries added to
    `PEAK_BF16_TFLOPS` at run time count.
    """
    lowered = device_name.lower()
    for key, peak in sorted(PEAK_BF16_TFLOPS.items(), key=lambda kv: len(kv[0]), reverse=True):
        if key.lower() in lowered:
            return peak
    return None


def resolve_flops(explicit: float | None) -> float | None:
    """FLOPs per step per rank: the argument, else `VIGIL_FLOPS_PER_STEP`."""
    if explicit is not None:
        if explicit < 0:
            raise ValueError(f"flops_per_step must be >= 0, got {explicit}")
        return float(explicit)
    return env.number(env.FLOPS_PER_STEP)


def resolve_peak(explicit: float | None, device_name: str | None) -> float | None:
    """Peak TFLOP/s: the argument, else `VIGIL_GPU_PEAK_TFLOPS`, else the device table."""
    if explicit is not None:
        if not explicit > 0:
            raise ValueError(f"gpu_peak_tflops must be > 0, got {explicit}")
        return float(explicit)
    from_env = env.number(env.GPU_PEAK_TFLOPS)
    if from_env is not None:
        return from_env
    return peak_for_device(device_name) if device_name else None


def throughput(
    flops: float | None, step_ms: float, peak_tflops: float | None
) -> tuple[float | None, float | None]:
    """(tflops, mfu) of one step; either is None when it cannot be computed honestly."""
    if flops is None or step_ms <= 0:
        return None, None
    tflops = flops / (step_ms / 1e3) / 1e12
    if peak_tflops is None:
        return tflops, None
    mfu = tflops / peak_tflops
    return tflops, (mfu if mfu <= MAX_PLAUSIBLE_MFU else None)
