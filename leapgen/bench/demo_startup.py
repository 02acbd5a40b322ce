"""How long ``leapgen demo`` takes to become interactive (issue #18's 20 s target).

Each run starts ``leapgen demo`` in a fresh process on a free local port, opens the page in
Debian's headless chromium (Playwright) as soon as the server answers, and stops the clock when the
first tab's **Run** button is visible: the moment a person can use the page. Runs are sequential;
the table gives every run and the median, plus the machine's load average at the start (another
job on the two cores slows the start-up).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError

CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(runs: int = 3, timeout_s: float = 120.0) -> list[float]:
    """Seconds from ``leapgen demo`` to an interactive page, one number per run."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise ConfigError("the demo start-up bench needs playwright (pip install -e '.[demo,test]')") from err
    if not Path(CHROMIUM).exists():
        raise ConfigError(f"{CHROMIUM} is missing: install Debian's chromium (`make system-deps`).")
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            for _ in range(runs):
                port = _free_port()
                t0 = time.perf_counter()
                proc = subprocess.Popen(["leapgen", "demo", "--port", str(port)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                page = browser.new_page()
                try:
                    while True:
                        if proc.poll() is not None:
                            raise ConfigError(f"leapgen demo exited with code {proc.returncode} before serving")
                        if time.perf_counter() - t0 > timeout_s:
                            raise ConfigError(f"leapgen demo did not serve within {timeout_s:.0f} s")
                        try:
                            page.goto(f"http://127.0.0.1:{port}/", timeout=2000)
                            break
                        except Exception:  # not listening yet
                            time.sleep(0.2)
                    page.get_by_role("button", name="Run").first.wait_for(state="visible", timeout=timeout_s * 1000)
                    out.append(time.perf_counter() - t0)
                finally:
                    page.close()
                    proc.terminate()
                    proc.wait(timeout=30)
        finally:
            browser.close()
    return out


def run(runs: int = 3, out: str = "docs") -> dict[str, Any]:
    """Measure and write ``bench_demo_startup.md`` / ``.json`` into ``out``."""
    load = os.getloadavg()[0]
    times = measure(runs)
    res = {"runs_s": times, "median_s": statistics.median(times), "target_s": 20.0, "load_average_at_start": load,
           "machine": f"{platform.platform()}, {os.cpu_count()} CPUs"}
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    (o / "bench_demo_startup.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Demo start-up (`leapgen bench demo-startup`)", "",
             "Seconds from launching `leapgen demo` (every shipped pipeline) to the first tab's Run button "
             f"being visible in headless chromium. Machine: {res['machine']}; load average at start {load:.2f}.", "",
             "| run | seconds |", "|---|---|"]
    lines += [f"| {i + 1} | {t:.1f} |" for i, t in enumerate(times)]
    lines += ["", f"Median **{res['median_s']:.1f} s** (target <= 20 s)."]
    (o / "bench_demo_startup.md").write_text("\n".join(lines) + "\n")
    return res


__all__ = ["measure", "run"]
