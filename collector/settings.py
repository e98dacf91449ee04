"""Settings of the node agent: identity, filesystem roots, intervals, delivery limits.

Environment variables use the prefix `VIGIL_`; the fixed names other tooling relies on
are `VIGIL_HOST`, `VIGIL_JOB_ID`, `VIGIL_SYSFS_ROOT`, `VIGIL_PROCFS_ROOT` and
`VIGIL_SPOOL_DIR` (shared with the step timer). The `[collector]` table of the
`VIGIL_CONFIG` file supplies defaults (e.g. `rules = [{pattern=..., category=..., severity=...}]`);
the environment wins over it, and command-line options win over both.

Paths left unset are placed under `VIGIL_HOME` by `resolve_paths`.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from vigil.settings import VigilBaseSettings
from vigil.trainside.identity import safe_name

TRAINING_SIDE = ("vigil.timer", "vigil.recovery.checkpoint", "vigil.data")  # stdlib + torch only (import-linter)


class CollectorSettings(VigilBaseSettings):
    """Everything `vigil run` and `vigil collector` can be told."""

    config_section: ClassVar[str | None] = "collector"

    host: str = Field(default_factory=socket.gethostname, min_length=1, max_length=256,
                      description="host identity of this agent (several agents on one machine = several hosts)")
    job_id: str = Field(default="default", min_length=1, max_length=256)
    sysfs_root: Path = Path("/sys")
    procfs_root: Path = Path("/proc")
    spool_dir: Path | None = Field(default=None, description="step timer spool; unset = $VIGIL_HOME/spool")
    fr_dir: Path | None = Field(default=None, description="Flight Recorder dumps; unset = $VIGIL_HOME/fr")
    output_dir: Path | None = Field(default=None, description="`vigil run` child output; unset = $VIGIL_HOME/output")
    state_dir: Path | None = Field(default=None, description="outbox and offsets; unset = $VIGIL_HOME/agent/<host>")
    log_dirs: list[Path] = Field(default_factory=list, description="`vigil collector`: log files to classify")
    process_match: str | None = Field(default=None, description="`vigil collector`: regex on cmdlines to track")

    heartbeat_interval: float = Field(default=2.0, gt=0)
    nic_interval: float = Field(default=1.0, gt=0)
    poll_interval: float = Field(default=0.5, gt=0, description="how often spool/log/FR files are checked")
    ib_polling_s: float = Field(default=30.0, gt=0, description="an InfiniBand port whose link stays in Polling "
                                "this long is a fault (ib_port_polling: critical where the port was seen up, a "
                                "warning to watch where it never came up since the agent started)")
    ib_report_s: float = Field(default=60.0, gt=0, description="growth of a port's error counters is reported at "
                               "most this often (with the growth since the last report)")
    nic_exclude: str = r"^(lo|docker\d*|veth.*|virbr.*|br-.*|cni.*|flannel.*)$"

    kmsg_path: Path | None = Field(default=Path("/dev/kmsg"), description="the kernel log followed for hardware "
                                   "facts (Xid, SXid, AER, link down, EDAC/MCE, OOM-killer); unset or empty: none")
    kernel_log: Literal["auto", "kmsg", "journald"] = Field(
        default="auto", description="where the kernel log is read: kmsg (kmsg_path), journald (`journalctl -k -o "
        "json --follow`, its cursor saved), auto: kmsg_path where it is readable, else journald")
    kernel_settle_s: float = Field(default=2.0, ge=0, le=30, description="before a failed command's exit is "
                                   "reported, how long the agent waits at most for its kernel log to be read past "
                                   "the exit (the driver's Xid comes before the error the rank sees)")
    dcgm: bool = Field(default=True, description="read DCGM's health watches where DCGM (its Python bindings and "
                       "host engine) is installed; skipped where it is not")
    dcgm_address: str = Field(default="127.0.0.1", max_length=256, description="DCGM's host engine (nv-hostengine)")
    dcgm_interval_s: float = Field(default=30.0, gt=0, description="how often DCGM's health check runs")
    journalctl: str = Field(default="journalctl", min_length=1, max_length=4096,
                            description="the journalctl executable (a name looked up on PATH, or a path)")
    rules: list[dict[str, Any]] = Field(default_factory=list, description="user log rules, tried before built-ins")
    rules_file: Path | None = Field(default=None, description="TOML file with [[rules]] tables")
    flood_burst: int = Field(default=20, ge=1, description="events per (category, rank) per window before summarising")
    flood_window_s: float = Field(default=10.0, gt=0)

    outbox_max_mb: float = Field(default=256.0, gt=0, description="disk spool bound; oldest dropped beyond it")
    memory_buffer_events: int = Field(default=10_000, ge=1, description="buffer when the disk spool is unwritable")
    delivery_timeout_s: float = Field(default=5.0, gt=0, description="Kafka message timeout of the agent")
    batch_max_events: int = Field(default=2000, ge=1)
    output_max_mb: float = Field(default=64.0, gt=0, description="size of one child output file before rotation")
    output_keep: int = Field(default=3, ge=0, description="rotated child output files kept per stream")
    fr_max_entries: int = Field(default=500, ge=1, description="newest Flight Recorder entries kept per dump")
    kill_grace_s: float = Field(default=30.0, ge=0, description="after a forwarded signal, SIGKILL the tree")
    attribute_ranks: bool = Field(default=True, description="`vigil run` of torchrun: add --log-dir and --tee 3 "
                                  "(when not given) so every worker line and error file names its rank")
    drain_timeout_s: float = Field(default=10.0, ge=0, description="at exit, time to deliver what is pending")
    warm_start: bool = Field(default=True, description="`vigil run --nodes` of torchrun: keep the next generation's "
                             "interpreters started with `warm_imports` imported, so a (re)start skips process start "
                             "and imports (collector.control.warm); every agent of a job must agree")
    warm_refill_delay_s: float = Field(default=5.0, ge=0, description="after a warm start, when the next "
                                       "generation's interpreters start importing (not during the restart itself)")
    warm_diagnostics: bool = Field(default=True, description="`vigil run --nodes`: keep the next diagnostics child "
                                   "started with torch imported, so a `diagnose` round skips process start and imports "
                                   "(collector.control.warmdiag; one idle interpreter per agent)")
    warm_imports: list[str] = Field(default_factory=lambda: ["torch", "torch.distributed", "torch.distributed.checkpoint"],
                                    description="modules a warm interpreter imports before its order (the job's heavy "
                                    "imports; training-side only: never a vigil platform module)")

    snapshot_root: Path = Field(default=Path("/dev/shm/vigil"), description="host memory for in-memory snapshots "
                                "(a tmpfs): the ranks write under <root>/<host>/<job>, peers' copies land there too")
    snapshot_keep: int = Field(default=2, ge=1, description="snapshots kept per rank of the copies held for peers")
    snapshot_max_rank_mb: float = Field(default=4096.0, gt=0, description="a bigger rank snapshot is not copied")
    snapshot_max_host_mb: float = Field(default=16384.0, gt=0, description="bound of all peer copies on this host")
    replicate_snapshots: bool = Field(default=True, description="`vigil run --nodes`: copy each new snapshot to "
                                      "the buddy host (next in the ring) and stage a moved rank's before a start")
    replicate_interval_s: float = Field(default=0.2, gt=0, description="how often new snapshots are looked for "
                                        "(a copy lags its snapshot by up to this plus the copy)")

    @field_validator("process_match", "nic_exclude")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v

    @field_validator("warm_imports")
    @classmethod
    def _training_side(cls, v: list[str]) -> list[str]:
        platform = [m for m in v if m.split(".")[0] == "vigil" and not any(m == t or m.startswith(f"{t}.")
                                                                           for t in TRAINING_SIDE)]
        if platform:
            raise ValueError(f"a warm interpreter imports training-side modules only, not {', '.join(platform)}")
        return v

    @field_validator("kmsg_path", mode="before")
    @classmethod
    def _none_when_empty(cls, v: Any) -> Any:
        return None if v is None or str(v).strip() == "" else v

    @field_validator("sysfs_root", "procfs_root", "spool_dir", "fr_dir", "output_dir", "state_dir", "rules_file",
                     "snapshot_root", "kmsg_path")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None


@dataclass(frozen=True, kw_only=True)
class AgentPaths:
    """Where this agent reads and writes, every path resolved."""

    spool_dir: Path
    fr_dir: Path
    output_dir: Path
    state_dir: Path

    @property
    def outbox_dir(self) -> Path:
        return self.state_dir / "outbox"

    @property
    def offsets_file(self) -> Path:
        return self.state_dir / "offsets.json"


def resolve_paths(settings: CollectorSettings, home: Path) -> AgentPaths:
    host = safe_name(settings.host)
    return AgentPaths(
        spool_dir=(settings.spool_dir or home / "spool").absolute(),
        fr_dir=(settings.fr_dir or home / "fr").absolute(),
        output_dir=(settings.output_dir or home / "output").absolute(),
        state_dir=(settings.state_dir or home / "agent" / host).absolute(),
    )


def snapshot_memory(settings: CollectorSettings, host: str) -> Path:
    """`host`'s snapshot memory for this job: `<snapshot_root>/<host>/<job>` (its ranks' VIGIL_SNAPSHOT_DIR)."""
    return settings.snapshot_root.absolute() / safe_name(host) / safe_name(settings.job_id)
