"""`SlurmBackend`: the `NodeBackend` calls as `scontrol` drains and resumes (see the package docstring)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable

from vigil.recovery.backends.base import Change, CordonInfo, GpuQuarantine
from vigil.recovery.backends.slurm.cli import SlurmCli, SubprocessCli
from vigil.recovery.backends.slurm.nodes import (
    SINFO_FORMAT,
    NodeState,
    make_reason,
    parse_reason,
    parse_scontrol,
    parse_sinfo,
)
from vigil.recovery.backends.slurm.relaunch import Relaunch
from vigil.recovery.backends.slurm.settings import SlurmSettings
from vigil.recovery.errors import BackendError

log = logging.getLogger(__name__)


class SlurmBackend:
    """`NodeBackend` on a Slurm cluster; `cli` defaults to the real tools (`SubprocessCli`)."""

    name = "slurm"
    gpu_quarantine = False  # no per-GPU cordon: the controller drains the node

    def __init__(self, settings: SlurmSettings, *, cli: SlurmCli | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._cli = cli if cli is not None else SubprocessCli(settings.conf)
        self._clock = clock
        self._nodes: dict[str, NodeState] | None = None  # the last sinfo read
        self._read_at = -math.inf
        self.stale = ""  # why the last read failed while an older one is served ("" when fresh)
        self._relaunch = Relaunch(settings, self._cli, clock)

    # -- NodeBackend ---------------------------------------------------------------------------

    def cordon(self, host: str, *, reason: str, incident_id: str, actor: str) -> Change:
        node = self._show(host)
        if node.ours:
            return Change(changed=False, detail=f"node {node.name} already drained by vigil: {node.reason}",
                          data={"node": node.name, "at": node.at})
        if node.reason:  # someone else's drain or down: evidence, never overwritten
            return Change(changed=False, data={"node": node.name, "external": node.reason},
                          detail=f"node {node.name} is {node.state} by someone else ({node.reason!r}, "
                                 f"{node.user or '?'}): left so, their reason kept")
        why = make_reason(incident_id, reason, limit=self.settings.reason_chars)
        self._update(node.name, "state=drain", f"reason={why}")
        return Change(changed=True, detail=f"node {node.name} drained: {why}", data={"node": node.name, "reason": why})

    def uncordon(self, host: str, *, reason: str, actor: str) -> Change:
        node = self._show(host)
        if not node.drained:
            return Change(changed=False, detail=f"node {node.name} is not drained ({node.state})",
                          data={"node": node.name})
        if not node.ours:
            return Change(changed=False, data={"node": node.name, "external": node.reason},
                          detail=f"node {node.name} drained by someone else ({node.reason!r}, {node.user or '?'}): "
                                 f"not vigil's to resume, left so")
        incident = (parse_reason(node.reason) or ("", ""))[0]
        self._update(node.name, "state=resume")
        return Change(changed=True, detail=f"node {node.name} resumed by {actor} ({reason})",
                      data={"node": node.name, "was": node.reason, "incident_id": incident})

    def evict(self, host: str, *, job_id: str, reason: str, incident_id: str) -> Change:
        return Change(changed=False, detail="slurm: nothing to cancel; vigil's agents stop the job's ranks (the "
                                            "pause), the drain keeps new work off the node")

    def quarantine(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str, actor: str) -> Change:
        raise BackendError(f"slurm backend: no per-GPU cordon (host {host}, GPUs {list(gpus)}): drain the node")

    def quarantined(self) -> dict[str, GpuQuarantine]:
        return {}

    def cordoned(self) -> dict[str, CordonInfo]:
        """The nodes vigil drained (reason `vigil: ...`), by host; others' drains are in `drained()`."""
        hosts = {n: h for h, n in self.settings.node_map.items()}
        out: dict[str, CordonInfo] = {}
        for node in self.nodes().values():
            if node.ours:
                incident, cause = parse_reason(node.reason) or ("", "")
                host = hosts.get(node.name, node.name)
                out[host] = CordonInfo(host=host, reason=cause, incident_id=incident, by=node.user, at=node.at)
        return out

    # -- Relauncher: a fresh job when the allocation is gone (`relaunch`) ---------------------------

    def allocation_gone(self, job_id: str) -> str | None:
        return self._relaunch.gone(job_id)

    def relaunch(self, job_id: str, *, exclude: Iterable[str], nodes_min: int, nodes_max: int, tag: str) -> Change:
        new, argv = self._relaunch.submit(job_id, exclude=exclude, nodes_min=nodes_min, nodes_max=nodes_max, tag=tag)
        return Change(changed=True, detail=f"{job_id}: submitted Slurm job {new} ({' '.join(argv)})"[:1000],
                      data={"new_job_id": new, "argv": argv})

    def relaunched(self, tag: str) -> str | None:
        return self._relaunch.find(tag)

    # -- reads -----------------------------------------------------------------------------------

    def drained(self) -> dict[str, NodeState]:
        """Every drained node, vigil's and others' (an external drain is evidence about its node)."""
        return {name: node for name, node in self.nodes().items() if node.drained}

    def drained_by_others(self) -> dict[str, dict[str, str]]:
        """Nodes drained or down with anyone else's reason, for `vigil recovery status`: node -> reason, by, at."""
        return {n: {"reason": s.reason, "by": s.user, "at": s.at} for n, s in self.nodes().items()
                if s.reason and not s.ours}

    def nodes(self) -> dict[str, NodeState]:
        """Every node's state: one `sinfo` per `read_interval_s` at most; on failure the last read, kept."""
        now = self._clock()
        if self._nodes is not None and now - self._read_at < self.settings.read_interval_s:
            return self._nodes
        argv = [self.settings.sinfo, "-h", "-N", "-o", SINFO_FORMAT]
        if self.settings.partition:
            argv += ["-p", self.settings.partition]
        try:
            nodes = parse_sinfo(self._cli.run(argv, timeout_s=self.settings.command_timeout_s))
        except (BackendError, ValueError) as exc:
            if self._nodes is None:
                raise BackendError(f"slurm backend: read node states: {exc}") from None
            self._read_at, self.stale = now, str(exc)  # the next try waits an interval too
            log.warning("slurm backend: node states not read, keeping the last known: %s", exc)
            return self._nodes
        self._nodes, self._read_at, self.stale = nodes, now, ""
        return nodes

    def node_name(self, host: str) -> str:
        return self.settings.node_map.get(host, host)

    def _show(self, host: str) -> NodeState:
        """One node, read fresh before a write (`scontrol show node -o`, light next to `sinfo`)."""
        name = self.node_name(host)
        text = self._cli.run([self.settings.scontrol, "show", "node", "-o", name],
                             timeout_s=self.settings.command_timeout_s)
        try:
            node = parse_scontrol(text).get(name)
        except ValueError as exc:
            raise BackendError(f"slurm backend: host {host}: {exc}") from None
        if node is None:
            raise BackendError(f"slurm backend: host {host}: no Slurm node named {name!r}")
        return node

    def _update(self, name: str, *changes: str) -> None:
        self._cli.run([self.settings.scontrol, "update", f"nodename={name}", *changes],
                      timeout_s=self.settings.command_timeout_s)
        self._read_at = -math.inf  # the next read sees the change
