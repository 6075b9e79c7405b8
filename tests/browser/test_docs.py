"""/docs in chromium: Swagger UI renders the lab's API with nothing loaded from outside 127.0.0.1."""

import pytest

from tests.browser.conftest import wait_until

pytestmark = pytest.mark.slow


def test_swagger_ui_renders_the_api_offline(page, server):
    page.goto(f"{server}/docs")
    wait_until(page, "document.querySelectorAll('.opblock').length > 0")
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/analyze" in [path.replace("\u200b", "") for path in paths]
    page.locator(".opblock-post .opblock-summary").first.click()
    page.wait_for_selector(".opblock-post .try-out__btn")
    assert all(url.startswith(server) for url in page.requests)  # the page fixture also fails on others
