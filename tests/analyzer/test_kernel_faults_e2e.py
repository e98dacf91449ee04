"""Hardware faults from where the hardware reports them, through the real agent, broker and analyzer (issue 49).

A real `vigil collector` agent follows a fake `/dev/kmsg` (tests/support/kmsg_lines.py: the kernel's and the
drivers' own line formats) and a fake sysfs (two GPUs' PCI addresses under the nvidia driver, two InfiniBand
ports), attests its facts with its host's own agent key and ships them through the embedded broker; the live
analyzer (ingest + detectors + alert book, in-process) turns each class into its `error_log` alert,
`<host>/<category>`, with the source `kernel` / `sysfs`, the severity, the GPU index, the rank whose pid the
line names, and the Xid catalog's action, which the recovery controller reads (`catalog_class`).

The Xid lines of one host are one alert (`<host>/xid`) quoting the strongest action of its lines, so they are
written in steps of rising strength and each step's alert is awaited: Xid 13 and 31 (application: restart the
job, no cordon), 94 (contained ECC: reset the GPU), 48 (double-bit ECC: reset, critical), an unknown code
(investigate), 79 (off the bus: reboot, then check). InfiniBand: symbol errors growing (a warning: its own
alert by default, `log.hardware_min_severity`), a link that went down and came back, a port stuck in Polling.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events, start_agent
from tests.support.kmsg_lines import (
    AER,
    EDAC_CE,
    EDAC_UE,
    LINK_DOWN,
    MCE,
    NOISE,
    OOM,
    OOM_KILL,
    SXID,
    XID,
    FakeKmsg,
)
from tests.support.waiting import wait_until
from vigil.analyzer.alerts.view import fold, read_alert_events
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Heartbeat
from vigil.recovery.controller.triggers import catalog_class
from vigil.service import StackContext
from vigil.settings import VigilSettings
from vigil.signing import KeyStore

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.timeout(240)]
HOST = "h-kfault"
JOB = "job-kfault"
GPUS = ("0000:3b:00.0", "0000:86:00.0")  # GPU 0 and GPU 1, in PCI order under the nvidia driver
UNKNOWN_XID = "NVRM: Xid (PCI:0000:86:00): 999, pid='<unknown>', name=<unknown>, an Xid the catalog does not hold"
PORT_CODES = {"DOWN": 1, "ACTIVE": 4, "Polling": 2, "LinkUp": 5}


@pytest.fixture
def analyzer(topics: VigilSettings, clickhouse_dsn: str, database: str) -> Iterator[AnalyzerService]:
    ctx = StackContext(settings=topics, bootstrap=str(topics.kafka_bootstrap),
                       clickhouse=connect(clickhouse_dsn, database=database), clickhouse_dsn=clickhouse_dsn)
    # refresh_s: a firing alert is re-published every instant, so each step's action is on the topic even where
    # its severity did not change (the default re-publishes on a severity change or once a minute);
    # hardware_settle_s: a hardware line no crash claimed pages after 1 s, not 8 (no rank crashes here)
    service = AnalyzerService(ctx, AnalyzerSettings(group_id=f"g-{database}", batch_s=0.3, detect_interval_s=0.5,
                                                    refresh_s=1.0, eval_step_s=1.0,
                                                    incidents={"hardware_settle_s": 1.0}))
    service.start()
    yield service
    service.stop()


def write(path: Path, text: str) -> None:
    """Replace a sysfs file at once: the agent never reads it half written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def set_port(sysfs: Path, dev: str, state: str, phys: str, **counters: int) -> None:
    d = sysfs / "class" / "infiniband" / dev / "ports" / "1"
    (d / "counters").mkdir(parents=True, exist_ok=True)
    write(d / "state", f"{PORT_CODES[state]}: {state}\n")
    write(d / "phys_state", f"{PORT_CODES[phys]}: {phys}\n")
    for name, value in counters.items():
        write(d / "counters" / name, f"{value}\n")


def error_logs(topics: VigilSettings) -> dict[str, Alert]:
    """The latest event of each `error_log` alert of the job, by subject (`<host>/<category>`)."""
    events = [a for a in read_alert_events(topics, str(topics.kafka_bootstrap), timeout=5)
              if a.job_id == JOB and a.alert == "error_log"]
    return {a.subject: a for a in fold(events).values()}


def shape(a: Alert) -> tuple[object, ...]:
    ev = a.evidence
    return a.severity, ev["source"], ev["action"], ev["gpus"], ev["ranks"], ev["host_fault"]


def test_each_kernel_and_port_fault_class_raises_its_alert_with_gpu_rank_and_catalog_action(
        topics: VigilSettings, analyzer: AnalyzerService, tmp_path: Path) -> None:
    sysfs = tmp_path / "sysfs"
    for address in GPUS:
        (sysfs / "bus" / "pci" / "drivers" / "nvidia" / address).mkdir(parents=True)
    zero = dict.fromkeys(("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors"), 0)
    for dev in ("mlx5_0", "mlx5_1"):
        set_port(sysfs, dev, "ACTIVE", "LinkUp", **zero)
    kmsg = FakeKmsg(tmp_path / "kmsg")
    kmsg.write("Linux version 6.8.0 (builder@host)", pri=5)  # history: a first start reads after it
    KeyStore(topics.home / "keys").issue(HOST)  # the host's own agent key: its facts are attested
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "kfault-rank-marker"],
                            env={**os.environ, "RANK": "5", "LOCAL_RANK": "1"})
    env = agent_env(topics, str(topics.kafka_bootstrap), topics.home, VIGIL_KMSG_PATH=str(kmsg.path),
                    VIGIL_SYSFS_ROOT=str(sysfs), VIGIL_HEARTBEAT_INTERVAL="0.5", VIGIL_NIC_INTERVAL="0.5",
                    VIGIL_IB_REPORT_S="1", VIGIL_IB_POLLING_S="1")
    offsets = topics.home / "agent" / HOST / "offsets.json"
    agent = start_agent(["collector", "--host", HOST, "--job", JOB, "--match", "kfault[-]rank-marker"], env,
                        tmp_path / "agent.log")
    try:
        wait_until(lambda: offsets.exists() and "kmsg" in offsets.read_text(), 60, "the kernel log followed")
        wait_until(lambda: any(isinstance(e, Heartbeat) and rank.pid in {p.pid for p in e.processes}
                               for e in read_events(topics, str(topics.kafka_bootstrap), ["heartbeats"], timeout=2)),
                   60, "the rank process tracked")
        pid = str(rank.pid)

        def xid(code: int) -> str:
            return XID[code].replace("pid=4242", f"pid={pid}").replace("pid=4243", f"pid={pid}")

        kmsg.write(xid(13), xid(31))
        kmsg.write(SXID, AER, LINK_DOWN, NOISE, pri=4)
        kmsg.write(OOM_KILL.replace("4242", pid), OOM.replace("4242", pid), EDAC_CE, EDAC_UE, MCE)
        set_port(sysfs, "mlx5_0", "ACTIVE", "LinkUp", **{**zero, "symbol_error": 7, "link_downed": 1})
        set_port(sysfs, "mlx5_1", "DOWN", "Polling", **zero)
        expected = {
            # Xid 13, 31 of the rank's pid on GPU 0: the application's, restart the job, no cordon
            "xid": ("error", "kernel", "restart_job", [0], [5], False),
            "sxid": ("critical", "kernel", "cordon", [], [], True),  # an NVSwitch's: no GPU of the host
            "pcie_aer": ("critical", "kernel", "reboot_then_check", [1], [], True),  # the device: GPU 1
            "nic_link_down": ("error", "kernel", "watch", [], [], False),
            "oom": ("error", "kernel", "restart_job", [], [5], False),  # the OOM killer's victim: rank 5
            "host_memory": ("critical", "kernel", "cordon", [], [], True),  # EDAC UE (with a CE: one alert)
            "mce": ("error", "kernel", "investigate", [], [], True),
            "ib_symbol_errors": ("warning", "sysfs", "watch", [], [], False),  # a warning, its own alert
            "ib_link_flap": ("error", "sysfs", "watch", [], [], False),  # down and back up
            "ib_port_polling": ("critical", "sysfs", "cordon", [], [], True),
        }

        def shapes() -> dict[str, tuple[object, ...]]:
            return {s.split("/", 1)[1]: shape(a) for s, a in error_logs(topics).items() if a.status == "firing"}
        # awaited whole: lines of one class written together may straddle an instant (an alert of part of them)
        try:
            wait_until(lambda: shapes() == expected, 90, f"an alert for each of {sorted(expected)}", every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; got {shapes()}") from None
        alerts = error_logs(topics)
        assert {s.split("/", 1)[1]: shape(a) for s, a in alerts.items()} == expected  # no claim, nothing else
        assert alerts[f"{HOST}/xid"].evidence["xids"] == [13, 31]
        assert catalog_class(alerts[f"{HOST}/xid"], "hardware") == ("software", False, True)  # restart, no cordon
        assert catalog_class(alerts[f"{HOST}/ib_port_polling"], "hardware") == ("hardware", True, False)
        assert catalog_class(alerts[f"{HOST}/ib_symbol_errors"], "hardware") == (None, False, False)  # watch
        assert "mlx5_0 port 1: symbol_error +7" in alerts[f"{HOST}/ib_symbol_errors"].evidence["message"]

        steps = [  # (line, xids, severity, action, gpus, host_fault): the strongest action so far
            (xid(94), [13, 31, 94], "error", "reset_gpu", [0], True),
            (xid(48), [13, 31, 48, 94], "critical", "reset_gpu", [0, 1], True),
            (UNKNOWN_XID, [13, 31, 48, 94, 999], "critical", "investigate", [0, 1], True),
            (xid(79), [13, 31, 48, 79, 94, 999], "critical", "reboot_then_check", [0, 1], True),
        ]
        for line, xids, severity, action, gpus, host_fault in steps:
            kmsg.write(line)

            def quoted(xids: list[int] = xids) -> Alert | None:
                a = error_logs(topics).get(f"{HOST}/xid")
                return a if a is not None and a.evidence["xids"] == xids else None
            wait_until(quoted, 60, f"the xid alert quoting Xids {xids}", every=0.5)
            a = quoted()
            assert a is not None
            assert (a.severity, a.evidence["source"], a.evidence["action"], a.evidence["gpus"],
                    a.evidence["ranks"], a.evidence["host_fault"]) == (severity, "kernel", action, gpus, [5], host_fault)
            assert f"[source kernel, catalog action {action}]" in a.summary
            assert catalog_class(a, "hardware") == ("hardware", True, False)  # takes the GPU / host out
    finally:
        rank.kill()
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=60)
