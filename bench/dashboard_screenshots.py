"""Screenshots of the dashboard for docs/: the heatmap of a 1024-host job and the overview of a faulty one.

Uses one embedded ClickHouse holding both jobs: the benchmark's 1024-host x 8-GPU job
(bench/dashboard_render.py; straggler bench-host-0517 in `forward`) and the small
simulated job of the dashboard tests (straggler sim-host-0005 in `backward`, a NIC stop,
Xid errors, alerts from the analyzer's detectors). Serves the app, opens it in headless
Chromium, writes PNGs. With `--url`, shoots a running dashboard instead: `make demo`'s,
a few minutes in (the real torch job's heatmap and the alerts).

    python bench/dashboard_screenshots.py [--chdb /tmp/bench-dash] [--out docs]
    python bench/dashboard_screenshots.py --url http://127.0.0.1:8050 [--out docs]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from vigil.app.components import migrate_all  # noqa: E402
from vigil.clickhouse.client import connect  # noqa: E402
from vigil.dashboard.app import create_app  # noqa: E402
from vigil.dashboard.server import ThreadedServer  # noqa: E402
from vigil.dashboard.settings import DashboardSettings  # noqa: E402

SHOTS = [
    ("dashboard-heatmap.png", "/heatmap?job=bench-1024&rows=worst", "#heatmap-panel .main-svg"),
    ("dashboard-overview.png", "/overview?job=dash-sim", "#step-graph .main-svg"),
    ("dashboard-heatmap-sim.png", "/heatmap?job=dash-sim", "#heatmap-panel .main-svg"),
    ("dashboard-network.png", "/network?job=dash-sim", "#network-graph .main-svg"),
]
DEMO_SHOTS = [
    ("demo-heatmap-torch.png", "/heatmap?job=demo-torch&range=15m", "#heatmap-panel .main-svg"),
    ("demo-alerts.png", "/alerts", "#alerts-table"),
]


def ensure_data(chdb_dir: str) -> object:
    import dashboard_render as bench

    from tests.dashboard.simdata import JOB, populate

    client = connect(f"chdb://{os.path.abspath(chdb_dir)}", database="bench")
    migrate_all(client, 3650)

    def count(job: str) -> int:
        return int(client.query("SELECT count() FROM job_clock WHERE job_id = {j:String}",
                                parameters={"j": job}).result_rows[0][0])

    if not count(bench.JOB):
        from datetime import UTC, datetime, timedelta

        start = (datetime.now(UTC) - timedelta(seconds=600 * bench.STEP_S + 60)).replace(microsecond=0)
        bench.generate(client, 1024, 600, start)
    if not count(JOB):
        populate(client)
    return client


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chdb", default="/tmp/bench-dash")
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--url", default=None, help="shoot this running dashboard (e.g. make demo's) instead")
    args = ap.parse_args(argv)
    server: ThreadedServer | None = None
    if args.url:
        base, shots = args.url.rstrip("/"), DEMO_SHOTS
    else:
        client = ensure_data(args.chdb)
        server = ThreadedServer(app=create_app(client, DashboardSettings(refresh_s=3600)).server)  # type: ignore[arg-type]
        base, shots = server.start().rstrip("/"), SHOTS

    from selenium import webdriver
    from selenium.webdriver.remote.remote_connection import RemoteConnection
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    RemoteConnection.set_timeout(120)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                 "--hide-scrollbars"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(executable_path="/usr/bin/chromedriver", options=opts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name, path, ready in shots:
            driver.get(base + path)
            WebDriverWait(driver, 60).until(ec.presence_of_element_located(("css selector", ready)))
            time.sleep(1.5)  # let plotly finish drawing
            driver.save_screenshot(str(out / name))
            print(f"{out / name}: {(out / name).stat().st_size // 1024} KB")
    finally:
        driver.quit()
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
