"""In-process step timer for training loops (CUDA events when available, host clock otherwise).

    from vigil.timer import StepTimer

    t = StepTimer()
    with t.step(tokens=4096):
        with t.phase("forward"):
            ...

Imports only the standard library here; torch is imported when a `StepTimer` is built.
See `timer/README.md` for the environment variables and the spool format.
"""

from vigil.timer.config import HangConfig, SpoolConfig, TimerConfig
from vigil.timer.core import StepTimer
from vigil.timer.identity import Identity
from vigil.timer.mfu import PEAK_BF16_TFLOPS, peak_for_device
from vigil.timer.step import Step
from vigil.trainside.env import default_spool_dir

__all__ = ["PEAK_BF16_TFLOPS", "HangConfig", "Identity", "SpoolConfig", "Step", "StepTimer", "TimerConfig", "default_spool_dir",
           "peak_for_device"]
