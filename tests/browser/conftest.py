"""A live uvicorn on a free 127.0.0.1 port, Debian's chromium driven by Playwright, every request recorded."""

import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.browser.chromium import launch

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="session")
def api(server):
    with httpx.Client(base_url=server, timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


def watched(page):
    """The page, keeping every request it makes (page.requests) and everything it raises (page.errors): an
    uncaught error, a console error, a dialog (dismissed)."""
    page.requests, page.errors = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and page.errors.append(f"console: {message.text}"))
    page.on("dialog", lambda dialog: page.errors.append(f"dialog opened: {dialog.message}") or dialog.dismiss())
    return page


def check_local(page, requests: int = 0, errors: int = 0) -> None:
    """Fails the test if a watched page's requests from the `requests`th on left 127.0.0.1, or it raised anything
    from its `errors`th on."""
    outside = [
        url
        for url in page.requests[requests:]
        if urlparse(url).hostname != "127.0.0.1" and not url.startswith(("blob:", "data:"))
    ]
    assert outside == [], f"requests left 127.0.0.1: {outside}"
    assert page.errors[errors:] == [], f"the page raised: {page.errors[errors:]}"


@pytest.fixture
def page(browser, server):
    """A fresh 1280×720 page (a projector's size); fails the test if any request leaves 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = watched(context.new_page())
    yield page
    context.close()
    check_local(page)


def wait_until(page, condition: str, timeout: float = 30):
    """Polls a JS condition from outside the page: Playwright's wait_for_function evaluates strings with
    eval, which the lab's Content-Security-Policy (rightly) refuses."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => Boolean({condition})"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"still false after {timeout} s: {condition}")
        page.wait_for_timeout(25)


def save(page, button: str):
    """Clicks one of the heatmap's Save… menu items (the menu opens first)."""
    if not page.locator(f"#{button}").is_visible():
        page.click("#export-menu")
    page.click(f"#{button}")


def open_panel(page, name: str):
    """Opens one of the stage's panels (worked example, grid, pipeline, sentence vector, experiments)."""
    if page.locator(f"#panel-tab-{name}").get_attribute("aria-selected") != "true":
        page.click(f"#panel-tab-{name}")


def screenshot(page, name: str, locator=None) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    (locator or page).screenshot(path=path, **({} if locator else {"full_page": True}))
    return path
