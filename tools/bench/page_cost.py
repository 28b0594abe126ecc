"""``python -m fyrehose.tools.bench.page_cost``: the live view's own work per message, in Chromium.

    python -m fyrehose.tools.bench.page_cost [--messages 100000] [--runs 3] [--json]

Whether the page keeps up at a rate is a matter of its work per message on
the browser's main thread: parsing the RESP value (with its sequence
attribute) and counting it.  This starts a backbone and an HTTP gateway on
loopback, opens the live view in headless Chromium (Debian's ``chromium``
and ``chromium-driver``, driven by Selenium, which then fetches nothing),
hands the page's own ``parse`` and ``received`` functions ``--messages``
pmessage values of 100 bytes on 10 subjects, and reports the time per
message, and the time of one redraw of the tables and of the chart (done at
most 4 and 1 times a second whatever the rate).  The browser's WebSocket
receive work is not included.  Needs the ``test`` extra (selenium).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import free_port

LOOPBACK = "127.0.0.1"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MEASURE = """
const n = arguments[0];
const frames = [];
for (let i = 0; i < 100; i++) {
  const subject = 'load.s' + (i % 10);
  frames.push(new TextEncoder().encode('|1\\r\\n+seq\\r\\n:' + (1000 + i) + '\\r\\n>4\\r\\n$8\\r\\npmessage\\r\\n'
    + '$1\\r\\n*\\r\\n$' + subject.length + '\\r\\n' + subject + '\\r\\n$100\\r\\n' + 'x'.repeat(100) + '\\r\\n'));
}
const t0 = performance.now();
for (let i = 0; i < n; i++) { const [value] = parse(frames[i % 100], 0); received(value); }
const t1 = performance.now();
state.dirty = true; drawTables(); const t2 = performance.now(); drawChart(); const t3 = performance.now();
return [t1 - t0, t2 - t1, t3 - t2];
"""


def measure(messages: int, runs: int) -> dict:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="fyrehose-page-cost-") as tmp:
        workdir = Path(tmp)
        backbone, port = f"{LOOPBACK}:{free_port()}", free_port(socket.SOCK_STREAM)
        started = [ChildProcess(FYREHOSE + ["backbone", "--listen", backbone, "--workers", "0",
                                            "--state-dir", str(workdir / "state")], workdir / "backbone.log")]
        driver = None
        try:
            started[0].wait_ready(30)
            started.append(ChildProcess(FYREHOSE + ["gateway", "http", "--listen", f"{LOOPBACK}:{port}",
                                                    "--backbone", backbone], workdir / "gateway.log"))
            started[1].wait_ready(30)
            options = webdriver.ChromeOptions()
            options.binary_location = CHROMIUM
            for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--no-first-run",
                         f"--user-data-dir={workdir / 'profile'}"):
                options.add_argument(flag)
            driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
            driver.get(f"http://{LOOPBACK}:{port}/")
            results = [driver.execute_script(MEASURE, messages) for _ in range(runs)]
        finally:
            if driver is not None:
                driver.quit()
            for child in reversed(started):
                child.stop()
    per_message = [total * 1000 / messages for total, _, _ in results]
    return {"messages": messages, "runs": runs,
            "runs_us_per_message": per_message, "median_us_per_message": statistics.median(per_message),
            "median_tables_redraw_ms": statistics.median(r[1] for r in results),
            "median_chart_redraw_ms": statistics.median(r[2] for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.bench.page_cost",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.runs < 1:
        parser.error("--messages and --runs must be positive")
    report = measure(args.messages, args.runs)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['messages']} messages, median of {report['runs']} runs: "
              f"{report['median_us_per_message']:.2f} us per message on the page's main thread "
              f"(runs {', '.join(f'{x:.2f}' for x in report['runs_us_per_message'])}); "
              f"a redraw of the tables {report['median_tables_redraw_ms']:.1f} ms, "
              f"of the chart {report['median_chart_redraw_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
