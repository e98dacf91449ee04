"""Reliability rows of the controller and the notifier (issue 23's table), run by bench/reliability.py.

* **controller SIGKILLed mid-recovery**: 6 `vigil run --nodes 1:6` agents (tests/recovery/fake_train.py),
  `vigil recovery run`, the real broker. `rounds` times, a host_fault incident on one more host is
  published (signed as the analyzer); once the controller has started the recovery's first step it is
  SIGKILLed and started again (3 rounds cordon half the hosts, the circuit breaker's limit). Offered:
  incidents; stored: recoveries that ended, by result; lost:
  incidents with no outcome; duplicated: controller decisions (incident, action, target, status)
  recorded more than once, outcomes included. Time to recover: SIGKILL -> the outcome.
* **notifier SIGKILLed mid-batch, receiver down**: `vigil notify run` with a webhook receiver on a
  loopback port; `alerts` firing alerts, one per job (one notification each), are published; once
  the receiver has taken a third of them it goes down (connections refused) and the notifier is
  SIGKILLed in the same instant, then started again; the receiver stays down `down_s` seconds and
  comes back. Offered: notifications due; stored: distinct notifications (Idempotency-Key) answered
  2xx; lost: due and never delivered; duplicated: 2xx deliveries beyond one per key (a re-send after
  a SIGKILL between the receiver's answer and the notifier's record of it carries the same key, so a
  receiver can drop it). Time to recover: receiver up -> every notification delivered.

Peak memory: the service's VmHWM, the largest over its instances.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # the test harness it drives; live.py's own imports

from tests.notify.events import alert  # noqa: E402
from tests.support.live import Live, fake_train  # noqa: E402
from tests.support.receiver import Receiver  # noqa: E402
from tests.support.recovery_waits import incident, training  # noqa: E402
from tests.support.signed import sealed  # noqa: E402
from vigil.contract import Outcome, RecoveryAction  # noqa: E402
from vigil.kafka.admin import ensure_topics  # noqa: E402
from vigil.kafka.producer import EventProducer  # noqa: E402
from vigil.settings import VigilSettings  # noqa: E402


def vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait(predicate: object, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def settings_for(bootstrap: str, tmp: Path) -> VigilSettings:
    s = VigilSettings(home=tmp / "home", kafka_bootstrap=bootstrap, topic_prefix=f"r{uuid.uuid4().hex[:8]}.",
                      topic_partitions=2)
    ensure_topics(s, bootstrap)
    return s


def controller_row(bootstrap: str, tmp: Path, rounds: int = 3) -> tuple[str, dict[str, object]]:
    tmp.mkdir(parents=True, exist_ok=True)
    live = Live(settings=settings_for(bootstrap, tmp), bootstrap=bootstrap, tmp=tmp,
                recovery_env={"VIGIL_RECOVERY_POLICY_DIAGNOSE_HARDWARE": "false"})
    job, hosts, peak, times, ids = "rel-ctl", [f"h{i}" for i in range(6)], 0, [], []
    try:
        for h in hosts:
            live.start_agent(h, fake_train(), nodes=f"1:{len(hosts)}", job=job)
        live.start_controller()
        live.wait_for(training(job, 1, len(hosts)), 300, "the job to start")
        for r in range(rounds):
            inc = incident(job, hosts[-1 - r], tag=f"round{r}")
            ids.append(inc.incident_id)
            live.publish([inc])
            live.wait_for(lambda s, i=inc.incident_id: (c := s.cases.get(i)) is not None  # type: ignore[misc]
                          and any(st.started_at is not None for st in c.steps.values()), 120, "a step to start")
            assert live.controller is not None
            peak = max(peak, vm_hwm_kib(live.controller.pid))
            t0 = time.monotonic()
            live.kill_controller()
            live.start_controller()
            live.wait_for(lambda s, i=inc.incident_id: live.outcome(i) is not None, 300, "the recovery to end")
            times.append(time.monotonic() - t0)
        assert live.controller is not None
        peak = max(peak, vm_hwm_kib(live.controller.pid))
    finally:
        live.close()
    outcomes = Counter(e.incident_id for e in live.events if isinstance(e, Outcome) and e.incident_id in ids)
    decisions = Counter((a.incident_id, a.action, a.target, a.status) for a in live.events
                        if isinstance(a, RecoveryAction) and a.actor == "controller" and a.incident_id in ids
                        and a.status != "skipped")
    results = Counter(o.result for i in ids if (o := live.outcome(i)) is not None)
    ended = ", ".join(f"{n} {r}" for r, n in sorted(results.items()))
    dup = sum(n - 1 for n in decisions.values()) + sum(n - 1 for n in outcomes.values())
    lost = sum(1 for i in ids if i not in outcomes)
    row = (f"| controller SIGKILLed mid-recovery (x{rounds}, {len(hosts)} hosts) | {rounds} incidents | {ended} | - | "
           f"{lost} | {dup} | {' / '.join(f'{t:.1f} s' for t in times)} (SIGKILL -> outcome, the restart included) | "
           f"{peak / 1024:.0f} MiB |")
    return row, {"times": times, "decisions": len(decisions), "dup": dup, "lost": lost}


def notifier_row(bootstrap: str, tmp: Path, alerts: int = 90, down_s: float = 300.0) -> tuple[str, dict[str, object]]:
    tmp.mkdir(parents=True, exist_ok=True)
    settings = settings_for(bootstrap, tmp)
    receiver = Receiver()
    receiver.up()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")},
           "VIGIL_HOME": str(settings.home), "VIGIL_KAFKA_BOOTSTRAP": bootstrap,
           "VIGIL_TOPIC_PREFIX": settings.topic_prefix, "VIGIL_TOPIC_PARTITIONS": "2",
           "VIGIL_CLICKHOUSE_DSN": f"chdb://{tmp / 'clickhouse'}", "VIGIL_NOTIFY_WEBHOOK_URL": receiver.url,
           "VIGIL_NOTIFY_GROUP_WAIT_S": "0.5", "VIGIL_NOTIFY_GROUP_INTERVAL_S": "0.5"}  # retries: the defaults
    log = tmp / "notify.log"

    def start() -> subprocess.Popen[bytes]:
        before = log.read_text().count("notifier running") if log.exists() else 0
        with open(log, "ab") as out:
            p = subprocess.Popen([sys.executable, "-m", "vigil", "notify", "run"], env=env, stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait(lambda: log.read_text().count("notifier running") > before, 300, "the notifier to run")
        return p

    proc, peak = start(), 0
    try:
        producer = EventProducer(settings=settings, bootstrap=bootstrap)
        producer.send(sealed(settings.home, [alert(f"job-{i:03d}", "straggler", f"h{i}/forward", host=f"h{i}")
                                             for i in range(alerts)]))
        producer.flush(30)
        wait(lambda: len({r.key for r in receiver.delivered()}) >= alerts // 3, 300, "a third delivered")
        receiver.down()
        peak = vm_hwm_kib(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        at_kill = len({r.key for r in receiver.delivered()})
        proc = start()
        time.sleep(down_s)  # the fault's length: the receiver stays down this long, whatever happens meanwhile
        receiver.up()
        t0 = time.monotonic()
        wait(lambda: len({r.key for r in receiver.delivered()}) >= alerts, down_s + 600, "every notification delivered")
        recover = time.monotonic() - t0
        time.sleep(2)  # a late duplicate, if any, would land now
        peak = max(peak, vm_hwm_kib(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        receiver.down()
    keys = Counter(r.key for r in receiver.delivered())
    dup = sum(n - 1 for n in keys.values())
    row = (f"| notifier SIGKILLed mid-batch, receiver down {down_s:.0f} s | {alerts} notifications | {len(keys)} | - | "
           f"{alerts - len(keys)} | {dup} | {recover:.1f} s (receiver up -> all delivered) | {peak / 1024:.0f} MiB |")
    return row, {"at_kill": at_kill, "requests": len(receiver.all()), "recover": recover}


if __name__ == "__main__":
    print("rows of bench/reliability.py: python bench/reliability.py --rows controller,notify")
