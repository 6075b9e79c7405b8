"""Lighthouse (the npm package, in Debian's chromium) on the lab's default page, desktop and mobile presets.

Starts the lab as `python -m app` on a free loopback port, runs each preset RUNS times and writes the
medians (scores, largest contentful paint, total blocking time, cumulative layout shift, bytes on the
wire) into bench/results.md between the lighthouse markers, and the raw reports into bench/lighthouse/.
`make bench` installs Lighthouse into bench/.lighthouse first.
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from app.web.pages import DEFAULT_TEXT

HERE = Path(__file__).resolve().parent
LIGHTHOUSE = HERE / ".lighthouse" / "node_modules" / ".bin" / "lighthouse"
REPORTS = HERE / "lighthouse"
RESULTS = HERE / "results.md"
START, END = "<!-- lighthouse -->", "<!-- /lighthouse -->"
RUNS = 3
CHROME_FLAGS = (
    "--headless=new --no-sandbox --disable-gpu --disable-background-networking --disable-component-update "
    "--disable-sync --no-first-run"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_lab(port: int, data_dir: str) -> subprocess.Popen:
    env = {**os.environ, "ATTENTION_LAB_DATA_DIR": data_dir}
    lab = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200:
                return lab
        except httpx.HTTPError:
            time.sleep(0.3)
    lab.kill()
    raise RuntimeError("the lab did not start")


def audit(url: str, preset: str, run: int) -> dict:
    report = REPORTS / f"{preset}-{run}.json"
    command = [str(LIGHTHOUSE), url, "--quiet", "--output=json", f"--output-path={report}"]
    command += [f"--chrome-flags={CHROME_FLAGS}", "--only-categories=performance,accessibility"]
    if preset == "desktop":
        command.append("--preset=desktop")
    subprocess.run(command, check=True, env={**os.environ, "CHROME_PATH": "/usr/bin/chromium"}, timeout=300)
    result = json.loads(report.read_text())
    audits = result["audits"]
    return {
        "performance": 100 * result["categories"]["performance"]["score"],
        "accessibility": 100 * result["categories"]["accessibility"]["score"],
        "lcp_ms": audits["largest-contentful-paint"]["numericValue"],
        "tbt_ms": audits["total-blocking-time"]["numericValue"],
        "cls": audits["cumulative-layout-shift"]["numericValue"],
        "bytes": audits["total-byte-weight"]["numericValue"],
        "lighthouse": result["lighthouseVersion"],
    }


def table(medians: dict[str, dict]) -> str:
    lines = [
        "| preset | performance | accessibility | LCP ms | TBT ms | CLS | KiB on the wire |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for preset, m in medians.items():
        lines.append(
            f"| {preset} | {m['performance']:.0f} | {m['accessibility']:.0f} | {m['lcp_ms']:.0f} | "
            f"{m['tbt_ms']:.0f} | {m['cls']:.3f} | {m['bytes'] / 1024:.0f} |"
        )
    return "\n".join(lines)


def write(medians: dict[str, dict], version: str) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    section = "\n".join(
        [
            START,
            "## Lighthouse on the default page",
            "",
            table(medians),
            "",
            f"Lighthouse {version} in Debian's chromium (headless), medians of {RUNS} runs per preset "
            f"(mobile: simulated slow 4G and a 4× slower CPU), {datetime.now(UTC):%Y-%m-%dT%H:%M}Z, lab at {commit}.",
            END,
        ]
    )
    text = RESULTS.read_text() if RESULTS.exists() else ""
    if START in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        text = f"{text.rstrip()}\n\n{section}\n"
    RESULTS.write_text(text)


def main() -> None:
    if not LIGHTHOUSE.exists():
        sys.exit("bench/lighthouse.py: Lighthouse is not installed; `make bench` installs it")
    REPORTS.mkdir(exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        lab = start_lab(port, data_dir)
        try:
            url = f"http://127.0.0.1:{port}/"
            # The default prompt's run is computed once before any measurement, as a warm server has it.
            httpx.post(f"{url}api/analyze", json={"text": DEFAULT_TEXT}, timeout=60).raise_for_status()
            runs = {preset: [audit(url, preset, run) for run in range(RUNS)] for preset in ("desktop", "mobile")}
        finally:
            lab.terminate()
            lab.wait(timeout=30)
    medians = {
        preset: {key: statistics.median(run[key] for run in results) for key in results[0] if key != "lighthouse"}
        for preset, results in runs.items()
    }
    write(medians, runs["desktop"][0]["lighthouse"])
    print(table(medians))


if __name__ == "__main__":
    main()
