"""The first second: the first screen loads no Plotly and does not jump; assets are compressed and cached."""

import re

import httpx
import pytest

from tests.browser.conftest import open_panel, wait_until
from tests.browser.test_page import open_lab, wait_view

pytestmark = pytest.mark.slow

# Sums every layout shift the page makes (as Lighthouse's cumulative layout shift counts them, without
# the shifts right after input), from the first paint on.
SHIFTS = """
  window.__shifts = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (!entry.hadRecentInput) window.__shifts += entry.value;
  }).observe({ type: "layout-shift", buffered: true });
"""


def test_the_first_screen_loads_no_plotly_and_a_chart_still_draws(page, server):
    open_lab(page, server)
    wait_view(page, "heatmap", 0, 0, 1)
    assert not [url for url in page.requests if "/vendor/plotly" in url]
    assert page.evaluate("typeof window.Plotly") == "undefined"
    open_panel(page, "pooled")
    page.wait_for_selector("#pooled .pooled-chart .main-svg", timeout=30_000)
    assert len([url for url in page.requests if "/vendor/plotly" in url]) == 1


@pytest.mark.parametrize(
    ("width", "height", "mobile"), [(1280, 720, False), (1024, 768, False), (390, 844, True)], ids=str
)
def test_filling_in_the_views_shifts_nothing(browser, server, width, height, mobile):
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=mobile, has_touch=mobile)
    try:
        page = context.new_page()
        page.add_init_script(SHIFTS)
        page.goto(server)
        wait_until(page, "document.getElementById('heatmap').dataset.view")
        page.wait_for_timeout(500)
        assert page.evaluate("window.__shifts") <= 0.1
    finally:
        context.close()


def test_assets_come_compressed_with_validators_and_long_lived_caching(server):
    with httpx.Client(base_url=server, headers={"Accept-Encoding": "br, gzip"}) as client:
        page = client.get("/")
        assert page.headers["content-encoding"] in ("br", "gzip") and page.headers["cache-control"] == "no-cache"
        assets = re.search(r'src="(/assets/[0-9a-f]+)/js/main\.js"', page.text).group(1)
        plotly = re.search(r'"plotly": "(/vendor/plotly-[^"]+\.min\.js)"', page.text).group(1)
        for url in (f"{assets}/js/main.js", f"{assets}/favicon.svg", plotly):
            response = client.get(url)
            assert response.status_code == 200
            assert response.headers["cache-control"] == "public, max-age=31536000, immutable", url
            assert "etag" in response.headers
        script = client.get(f"{assets}/js/main.js")
        assert script.headers["content-encoding"] in ("br", "gzip")
        with client.stream("GET", plotly) as big:
            wire = sum(len(chunk) for chunk in big.iter_raw())
        assert wire < len(client.get(plotly).content) / 3  # 4.7 MB of plotly.js, about a quarter on the wire
        fixed = client.get("/static/js/main.js")
        assert fixed.headers["cache-control"] == "no-cache"
        again = client.get("/static/js/main.js", headers={"If-None-Match": fixed.headers["etag"]})
        assert again.status_code == 304


def test_every_module_of_the_first_screen_is_named_at_once(server):
    page = httpx.get(server).text
    preloaded = set(re.findall(r'rel="modulepreload" href="/assets/[0-9a-f]+/js/([^"]+)"', page))
    assert {"main.js", "matrix.js", "heatmap.js", "views.js", "attention.js"} <= preloaded
    assert "/vendor/plotly" not in page.split('id="lab-config"')[0]  # plotly.js is fetched on demand
