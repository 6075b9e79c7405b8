"""The page in Debian's chromium: Enter → the first heatmap painted, and a token click → the updated view, both
timed inside the page with performance.now(), and the bytes fetched for that first heatmap."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from harness import Texts, median
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from tests.browser.chromium import launch

# Arms a probe before Enter: t0 at the keydown (capture phase, before the page's own handler), t1 when
# #heatmap's data-view names the new run, tPaint one animation frame later.
ARM_ENTER_PROBE = """() => {
  const probe = (window.__bench = { done: false });
  const before = document.body.dataset.run;
  const heatmap = document.getElementById("heatmap");
  const onKey = (event) => {
    if (event.key === "Enter" && probe.t0 === undefined) probe.t0 = performance.now();
  };
  document.addEventListener("keydown", onKey, true);
  const observer = new MutationObserver(() => {
    const run = document.body.dataset.run;
    if (!run || run === before || !(heatmap.dataset.view || "").startsWith(`${run}:`)) return;
    observer.disconnect();
    document.removeEventListener("keydown", onKey, true);
    probe.t1 = performance.now();
    requestAnimationFrame(() => { probe.tPaint = performance.now(); probe.done = true; });
  });
  observer.observe(heatmap, { attributes: true, attributeFilter: ["data-view"] });
}"""
# Arms a probe before a token click: t0 at the click, t1 once the heatmap outlines that row and the
# attends-to view shows that token, tPaint one animation frame later.
ARM_CLICK_PROBE = """(index) => {
  const probe = (window.__bench = { done: false });
  const heatmap = document.getElementById("heatmap");
  const attends = document.getElementById("attends");
  const onClick = () => { if (probe.t0 === undefined) probe.t0 = performance.now(); };
  document.addEventListener("click", onClick, true);
  const updated = () =>
    heatmap.dataset.selectedRow === String(index) && (attends.dataset.view || "").endsWith(`:${index}`);
  const observer = new MutationObserver(() => {
    if (probe.t0 === undefined || !updated()) return;
    observer.disconnect();
    document.removeEventListener("click", onClick, true);
    probe.t1 = performance.now();
    requestAnimationFrame(() => { probe.tPaint = performance.now(); probe.done = true; });
  });
  observer.observe(heatmap, { attributes: true, attributeFilter: ["data-selected-row"] });
  observer.observe(attends, { attributes: true, attributeFilter: ["data-view"] });
}"""
# The page has finished a run: not busy, and every drawn view belongs to the current run.
PAGE_SETTLED = """() => {
  const run = document.body.dataset.run;
  return document.body.dataset.busy === "false" && Boolean(run) &&
    [...document.querySelectorAll("[data-view]")].every((node) => node.dataset.view.startsWith(`${run}:`));
}"""
PROBE_TIMES = (
    "() => ({ drawn: window.__bench.t1 - window.__bench.t0, painted: window.__bench.tPaint - window.__bench.t0 })"
)


class Network:
    """Requests of one page: which are still in flight, which finished since the last clear(), and the
    page's uncaught errors."""

    def __init__(self, page):
        self.in_flight = set()
        self.finished = []
        page.on("request", self.on_request)
        page.on("requestfinished", self.on_finished)
        page.on("requestfailed", self.on_failed)
        self.errors = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def on_request(self, request) -> None:
        self.in_flight.add(request)

    def on_failed(self, request) -> None:
        self.in_flight.discard(request)

    def on_finished(self, request) -> None:
        self.in_flight.discard(request)
        self.finished.append(request)

    def clear(self) -> None:
        self.finished = []


def settle(page, network: Network) -> None:
    """Wait until the page has drawn everything and fetches nothing, so the next timing starts clean."""
    try:
        page.wait_for_function(PAGE_SETTLED, polling=50)
    except PlaywrightTimeout as error:
        # A page that never settles has usually thrown: say what it threw, not only that time ran out.
        raise RuntimeError(f"the page did not settle; its errors: {network.errors or 'none'}") from error
    while network.in_flight:
        page.wait_for_timeout(50)


def enter_to_heatmap(page, network: Network, text: str, n: int) -> dict:
    page.fill("#prompt", text)
    page.evaluate(ARM_ENTER_PROBE)
    network.clear()
    page.press("#prompt", "Enter")
    page.wait_for_function("() => window.__bench.done", polling="raf")
    # Requests finished by now are those the page waited for (or fetched alongside) before the heatmap.
    fetched = [
        {"url": path_of(request.url), "status": request.response().status, "bytes": body_bytes(request)}
        for request in network.finished
    ]
    times = page.evaluate(PROBE_TIMES)
    tokens = page.locator("#tokens .token").count()
    assert tokens == n, f"the page shows {tokens} tokens, wanted {n}"
    return {
        "enter_to_heatmap_ms": times["painted"],
        "enter_to_heatmap_drawn_ms": times["drawn"],
        "first_heatmap_bytes": sum(request["bytes"] for request in fetched),
        "first_heatmap_requests": fetched,
    }


def body_bytes(request) -> int:
    # A response from the browser's cache (the favicon, asked for again as the URL changes) crossed no
    # wire, and Playwright reports it as a negative body size: it downloaded nothing, so count 0.
    return max(0, request.sizes()["responseBodySize"])


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def click_to_view(page, n: int) -> dict:
    # Clicking the selected chip would clear the selection; click one that is not selected. The selection is
    # the chip's (the heatmap's row may be a preview of the chip the mouse rests on, after the strip changed).
    page.mouse.move(0, 0)
    selected = page.locator('#tokens .token[aria-selected="true"]')
    index = n // 2 if selected.count() == 0 or selected.first.get_attribute("data-index") != str(n // 2) else n // 2 - 1
    chip = page.locator(f'#tokens .token[data-index="{index}"]')
    chip.scroll_into_view_if_needed()  # scrolling is the test's doing, not the page's: keep it out of t0
    page.evaluate(ARM_CLICK_PROBE, index)
    chip.click()
    page.wait_for_function("() => window.__bench.done", polling="raf")
    times = page.evaluate(PROBE_TIMES)
    return {"click_to_view_ms": times["painted"], "clicked_index": index}


@contextmanager
def lab_page(base: str, timeout_ms: int) -> Iterator[tuple]:
    """The lab's page in chromium at 1280×720, loaded and settled: (page, its Network)."""
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(timeout_ms)
            network = Network(page)
            page.goto(f"{base}/")
            settle(page, network)
            yield page, network
        finally:
            browser.close()


def run_browser(base: str, texts: Texts, sizes: list[int], reps: int) -> dict[int, list[dict]]:
    results = {}
    with lab_page(base, 120_000) as (page, network):
        for n in sizes:
            # The first run of a size warms the page's drawing code for that shape; it is not counted.
            enter_to_heatmap(page, network, texts.unique(n), n)
            settle(page, network)
            samples = []
            for _ in range(reps):
                sample = enter_to_heatmap(page, network, texts.unique(n), n)
                settle(page, network)
                sample.update(click_to_view(page, n))
                settle(page, network)
                samples.append(sample)
            results[n] = samples
            print(f"  browser N={n}: Enter→heatmap {median(samples, 'enter_to_heatmap_ms'):.0f} ms", flush=True)
    return results
