"""Debian's chromium as the browser tests and the bench launch it (Playwright's own download is not reachable)."""

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# No sandbox (containers run as root); nothing of chromium's own reaches the network or the CPU beside the page.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch(playwright):
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
