"""The chaos test's restartable services and its end-to-end counts: nothing here asserts.

`Service` is one `python -m vigil ...` process (analyzer, notifier) with its own log, that the
test SIGKILLs and starts again; `ready()` is true once this start printed its "running" line. A
service that exits at start because the broker did not answer in time (its reachability check, on a
loaded machine right after the broker was stopped) is started again, as its supervisor (systemd,
Kubernetes) would: counted in `supervised`; any other exit fails the test.
`analyzer_service` and `chaos_job` are the analyzer process and the training job the real-job tests run.
`spooled_steps` reads the step records the training ranks wrote (the timer's JSON-lines spool,
complete lines only): the source side of the event-id count. `stored_steps` reads, in a child
process (chdb opens one engine per process), how many rows ClickHouse holds per step event id.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

STORED = """
import json, sys
from vigil.clickhouse.client import connect
rows = connect(sys.argv[1]).query("SELECT event_id, count() FROM step_timings GROUP BY event_id").result_rows
print(json.dumps({str(i): int(n) for i, n in rows}))
"""


@dataclass(kw_only=True)
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    running: str  # the line a started service prints
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    supervised: int = field(default=0, init=False)  # restarts after "Kafka not reachable" at start
    _before: int = field(default=0, init=False)

    def _count(self) -> int:
        return self.log.read_text(errors="replace").count(self.running) if self.log.exists() else 0

    def start(self) -> None:
        self._before = self._count()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "vigil", *self.argv], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            text = self.log.read_text(errors="replace")
            if self.proc is not None and "Kafka not reachable" in text.rstrip().rsplit("\n", 1)[-1]:
                self.supervised += 1
                self.start()
                return False
            raise AssertionError(f"{self.name} is not running: {text[-2000:]}")
        return self._count() > self._before

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)


WORKER = Path(__file__).resolve().parents[1] / "chaos" / "chaos_worker.py"


def analyzer_service(env: dict[str, str], tmp: Path) -> tuple[Service, str]:
    """A `vigil analyzer` process on a chdb store of its own under `tmp`, ingesting in 0.3 s batches: (the service,
    its store's DSN)."""
    dsn = f"chdb://{tmp / 'analyzer-ch'}"
    return Service(name="analyzer", argv=["analyzer"], log=tmp / "analyzer.log", running="analyzer running",
                   env={**env, "VIGIL_CLICKHOUSE_DSN": dsn, "VIGIL_ANALYZER_BATCH_S": "0.3"}), dsn


def chaos_job(tmp: Path, python: str = sys.executable) -> tuple[list[str], Path]:
    """The torchrun command line of chaos_worker.py (one rank per host, checkpoints under `tmp`/ckpt, run by
    `python`) and the file that ends the job: it trains until the file exists, then takes a few more steps and
    exits 0."""
    stop = tmp / "stop"
    return [python, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(WORKER), "--ckpt",
            str(tmp / "ckpt"), "--stop", str(stop)], stop


def spooled_steps(spool: Path) -> list[str]:
    """Event ids of every step record written under `spool` (any host), complete lines only."""
    ids: list[str] = []
    for path in sorted(spool.rglob("*.jsonl")):
        data = path.read_bytes()
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "step" and "event_id" in rec:
                ids.append(str(rec["event_id"]))
    return ids


def stored_steps(dsn: str, env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", STORED, dsn], env=env, capture_output=True, text=True, check=True,
                         timeout=300)
    counts: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return counts


LETTERS = """
import json, sys
from vigil.clickhouse.client import connect
rows = connect(sys.argv[1]).query("SELECT partition, offset, count() FROM dead_letters FINAL WHERE topic = {t:String} "
                                  "GROUP BY partition, offset", parameters={"t": sys.argv[2]}).result_rows
print(json.dumps([[int(p), int(o), int(n)] for p, o, n in rows]))
"""


def stored_letters(dsn: str, env: dict[str, str], topic: str) -> dict[tuple[int, int], int]:
    """Dead letters of `topic` in the analyzer's store: (partition, offset) -> letters."""
    out = subprocess.run([sys.executable, "-c", LETTERS, dsn, topic], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    return {(p, o): n for p, o, n in json.loads(out.stdout.strip().splitlines()[-1])}
