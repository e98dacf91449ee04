"""`StepTimer`: the public API a training loop uses to time steps and named phases.

    t = StepTimer()                       # identity from torchrun / `vigil run` env
    for batch in loader:
        with t.step(tokens=n_tok, samples=len(batch)):
            with t.phase("forward"):  loss = model(batch)
            with t.phase("backward"): loss.backward()
            with t.phase("grad_sync", kind="comm"): sync(model)
            with t.phase("optimizer"): opt.step()
    t.close()

Semantics:

* Nested phases are recorded under their path: ``phase("allreduce")`` inside
  ``phase("backward")`` is ``"backward/allreduce"``. The outer phase includes the inner.
  Repeated names within one step are summed (e.g. per micro-batch).
* Phases entered while no step is open (data loading before ``with t.step()``) are
  attached to the next step that opens; their time is not part of that step's `step_ms`.
* An exception inside a phase or a step closes it, marks the open step ``failed`` and
  propagates unchanged. A failed step is still recorded. (An exception in a phase outside
  any step marks nothing.)
* A ``step()`` entered while a step is open is a no-op (it yields the outer step).
* Disabled (``enabled=False`` or ``VIGIL_TIMER=0``) or under ``torch.compile`` tracing,
  ``step()``/``phase()`` return a shared no-op context manager and the decorators return
  the function unchanged (disabled) or skip timing (while compiling).
* One training thread: phases and steps must be entered from the thread that runs the
  loop. Writes, uuid generation and (CUDA) event polling happen on a daemon thread.
"""

from __future__ import annotations

import atexit
import functools
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from vigil.timer import digest as digests
from vigil.timer import mfu
from vigil.timer.clocks import CudaClock, HostClock
from vigil.timer.config import TimerConfig
from vigil.timer.contexts import NULL, NULL_STEP, PhaseContext, StepContext
from vigil.timer.health import capture
from vigil.timer.identity import Identity, resolve_identity
from vigil.timer.step import Step, render
from vigil.timer.watchdog import HangWatchdog
from vigil.trainside import env
from vigil.trainside.identity import resolve_rank
from vigil.trainside.spool import SpoolWriter
from vigil.trainside.spoolfile import location

P = ParamSpec("P")
PHASE_KINDS = ("compute", "comm", "wait")  # vigil.contract.phases.PhaseKind (the timer imports nothing of vigil)
R = TypeVar("R")


class StepTimer:
    """Times training steps and named phases and spools one JSON line per step.

    Configured by one `TimerConfig` (every field optional, the environment fills the
    rest; see `timer.config`). Its ``device``: ``"cpu"`` forces the host clock;
    ``"cuda"``/``"cuda:N"``/a `torch.device` forces CUDA events; None picks CUDA when
    ``torch.cuda.is_available()``.
    """

    def __init__(self, config: TimerConfig | None = None) -> None:
        import time

        import torch

        cfg = config if config is not None else TimerConfig()

        self.config = cfg
        self.enabled = env.flag(env.TIMER) if cfg.enabled is None else bool(cfg.enabled)
        self._id_args: dict[str, Any] = dict(
            job_id=cfg.job_id, host=cfg.host, rank=cfg.rank, local_rank=cfg.local_rank, world_size=cfg.world_size,
            coords=cfg.coords,
        )  # fmt: skip
        self._flops = mfu.resolve_flops(cfg.flops_per_step)
        self._peak_arg = cfg.gpu_peak_tflops
        self._peak: float | None = None
        sp = cfg.spool
        self._spool_dir = Path(sp.directory).expanduser() if sp.directory is not None else env.default_spool_dir()
        self._spool_opts: dict[str, Any] = dict(
            max_bytes=sp.max_file_bytes, keep_files=sp.keep_files, queue_size=sp.queue_size,
            flush_interval_s=sp.flush_interval_s, retry_s=sp.retry_s,
        )  # fmt: skip
        self._compiling: Callable[[], bool] = torch.compiler.is_compiling
        self._wall = time.time
        self._stack: list[str] = []
        self._cur = Step()
        self._next_index = cfg.start_step
        self._early_drops = 0
        self.identity: Identity | None = None
        self._writer: SpoolWriter[Step] | None = None
        self._clock: HostClock | CudaClock
        device = cfg.device
        use_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
        if self.enabled and use_cuda:
            self._clock = CudaClock(self._emit, self._drop, device=device, max_pending=cfg.max_pending)
        else:
            self._clock = HostClock(self._emit)
        self._watchdog: HangWatchdog | None = None
        hang = cfg.hang
        if self.enabled and (env.flag(env.HANG_WATCHDOG) if hang.enabled is None else hang.enabled):
            self._watchdog = HangWatchdog(hang, rank=self._rank)
        self._closed = False
        self._digest_failed = False
        if self.enabled:
            atexit.register(self._atexit)

    # ---- context managers ---------------------------------------------------------------
    def step(
        self,
        *,
        tokens: int | None = None,
        samples: int | None = None,
        flops: float | None = None,
        step: int | None = None,
    ) -> AbstractContextManager[Step]:
        """Context manager timing one step; yields the `Step` (set `.tokens` etc. inside).

        `step` sets this step's number (later ones continue from it); `flops` overrides
        `flops_per_step` for this step.
        """
        if not self.enabled or self._compiling():
            return NULL_STEP
        if step is not None and step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return StepContext(self, (tokens, samples, flops, step))

    def phase(self, name: str, kind: str | None = None) -> AbstractContextManager[None]:
        """Context manager timing a named phase of the current (or next) step.

        `kind` declares what the phase is: ``"compute"`` (the rank's own work), ``"comm"``
        (communication, including waiting for peers inside it) or ``"wait"`` (pure waiting,
        e.g. a pipeline bubble). Undeclared phases are classified by name downstream
        (``grad_sync``, ``all_reduce``, ``comm``, ... are comm; ``bubble`` is wait).
        """
        if kind is not None and kind not in PHASE_KINDS:
            raise ValueError(f"phase kind must be one of {', '.join(PHASE_KINDS)}, got {kind!r}")
        if not self.enabled or self._compiling():
            return NULL
        return PhaseContext(self, name, kind)

    def annotate(
        self, *, tokens: int | None = None, samples: int | None = None, flops: float | None = None
    ) -> None:
        """Set tokens / samples / flops of the current (or next) step."""
        cur = self._cur
        if tokens is not None:
            cur.tokens = tokens
        if samples is not None:
            cur.samples = samples
        if flops is not None:
            cur.flops = flops

    def health(
        self, *, loss: Any = None, grad_norm: Any = None, nonfinite: Any = None, update_ratio: Any = None
    ) -> None:
        """Report the current step's training-health signals (numbers or 0-dim tensors; see `timer.health`).

        Call it inside the step: a CUDA tensor is read once the step's own events completed, never synchronised."""
        if not self.enabled:
            return
        given = {"loss": loss, "grad_norm": grad_norm, "nonfinite": nonfinite, "update_ratio": update_ratio}
        self._cur.health.update({k: capture(v) for k, v in given.items() if v is not None})

    def digest(self, params: Any) -> bool:
        """Take this step's replica digest of `params` (the rank's parameter shard, in a fixed order) when the step is
        a multiple of `digest_every`; True when taken. Call it inside the step, after the optimizer step.

        Computed on the parameters' device, read like the health signals (never a sync). It never raises: a failure
        warns once and turns digests off for this timer."""
        every = self.config.digest_every
        if not self.enabled or every <= 0 or not self._cur.is_open or self._cur.index % every or self._digest_failed:
            return False
        try:
            self._cur.digest = digests.capture(digests.param_digest(params))
        except Exception as exc:  # a digest must never reach training
            self._digest_failed = True
            warnings.warn(f"timer: replica digests off: {exc!r}", RuntimeWarning, stacklevel=2)
            return False
        return True

    # ---- decorators ---------------------------------------------------------------------
    @overload
    def timed(self, name: Callable[P, R], /) -> Callable[P, R]: ...
    @overload
    def timed(
        self, name: str | None = None, /, *, kind: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
    def timed(self, name: Any = None, /, *, kind: str | None = None) -> Any:
        """Decorator timing each call as a phase: ``@t.timed("optimizer")``,
        ``@t.timed("grad_sync", kind="comm")`` or bare ``@t.timed`` (the phase is then the
        function's ``__name__``)."""
        if kind is not None and kind not in PHASE_KINDS:
            raise ValueError(f"phase kind must be one of {', '.join(PHASE_KINDS)}, got {kind!r}")
        if callable(name):
            fn: Callable[..., Any] = name
            return self._timed_as(fn.__name__, None)(fn)
        return self._timed_as(name, kind)

    def _timed_as(self, name: str | None, kind: str | None) -> Callable[[Callable[P, R]], Callable[P, R]]:

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if not self.enabled:
                return fn
            label = name or fn.__name__

            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.phase(label, kind):
                    return fn(*args, **kwargs)

            return wrapper

        return decorate

    @overload
    def timed_step(self, fn: Callable[P, R], /) -> Callable[P, R]: ...
    @overload
    def timed_step(
        self, fn: None = None, /, *, tokens: int | None = None, samples: int | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
    def timed_step(self, fn: Any = None, /, *, tokens: int | None = None, samples: int | None = None) -> Any:
        """Decorator timing each call as one step: ``@t.timed_step`` or
        ``@t.timed_step(tokens=4096)``; call `annotate()` inside for per-call counts."""

        def decorate(f: Callable[P, R]) -> Callable[P, R]:
            if not self.enabled:
                return f

            @functools.wraps(f)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.step(tokens=tokens, samples=samples):
                    return f(*args, **kwargs)

            return wrapper

        return decorate(fn) if fn is not None else decorate

    # ---- plumbing -----------------------------------------------------------------------
    def _rank(self) -> int:
        """This process's rank (the watchdog names its dump with it)."""
        return self.identity.rank if self.identity is not None else resolve_rank(self.config.rank)

    @property
    def watchdog(self) -> HangWatchdog | None:
        """The hang watchdog (None when disabled)."""
        return self._watchdog

    def _drop(self, n: int) -> None:
        if self._writer is not None:
            self._writer.count_dropped(n)
        else:
            self._early_drops += n

    def _start_writer(self) -> SpoolWriter[Step]:
        ident = resolve_identity(**self._id_args)
        self.identity = ident
        self._peak = mfu.resolve_peak(self._peak_arg, self._clock.device_name)
        directory, stem = location(self._spool_dir, ident)
        flops, peak = self._flops, self._peak
        writer: SpoolWriter[Step] = SpoolWriter(
            directory, stem, lambda s: render(s, ident, flops, peak),
            idle_hook=self._clock.poll, **self._spool_opts,
        )  # fmt: skip
        if self._early_drops:
            writer.count_dropped(self._early_drops)
            self._early_drops = 0
        self._writer = writer
        return writer

    def _ensure_writer(self) -> SpoolWriter[Step] | None:
        if self._writer is None and self.enabled:
            try:
                self._start_writer()
            except Exception as exc:  # identity/spool trouble must never reach training
                self.enabled = False
                warnings.warn(
                    f"timer: disabled, cannot start the spool: {exc!r}", RuntimeWarning, stacklevel=3
                )
        return self._writer

    def _emit(self, step: Step) -> None:
        writer = self._writer or self._ensure_writer()
        if writer is not None:
            writer.put(step)

    # ---- lifecycle ----------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        """Step records dropped so far (queue full, too many pending, write errors)."""
        return self._early_drops + (self._writer.dropped if self._writer is not None else 0)

    @property
    def written(self) -> int:
        """Step records written to the spool so far."""
        return self._writer.written if self._writer is not None else 0

    @property
    def spool_path(self) -> Path | None:
        """The file currently appended to (None before the first write)."""
        return self._writer.current_path if self._writer is not None else None

    @property
    def spool_dir(self) -> Path:
        return self._spool_dir

    def flush(self, timeout: float = 5.0) -> bool:
        """Emit completed steps and wait (bounded) until they are written. Never synchronises CUDA."""
        self._clock.poll()
        return self._writer.flush(timeout) if self._writer is not None else True

    def close(self, timeout: float = 5.0) -> None:
        """Emit what the GPU finished within `timeout`, write it, stop; later steps are no-ops."""
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.stop()
        left = self._clock.drain(timeout)
        if left:
            self._drop(left)
        if self._writer is not None:
            self._writer.close(timeout)
        self.enabled = False
        atexit.unregister(self._atexit)

    def _atexit(self) -> None:
        self.close(timeout=2.0)

    def __enter__(self) -> StepTimer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
