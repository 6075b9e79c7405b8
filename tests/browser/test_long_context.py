"""The page at 4,096 tokens of a tiny random Llama-style decoder: the heatmap draws the server's max-pooled
overview (said in its title), a zoom fetches exact cells, the keyboard cursor and the tooltip read exact
numbers, the token search jumps to a passage, and the attends view lists the top keys beside a strip of the
whole row. Every number on screen is checked against the API's exact answer."""

import re

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from app.web.encoding import decode_attention
from tests.browser.conftest import screenshot, wait_until
from tests.conftest import LabProcess
from tests.families import long_llama

WORDS = "the cat sat on the mat a quick brown fox jumps over the lazy dog".split()
# More than 4,096 tokens (the tokenizer's tiny vocabulary cuts most words in two), read up to the model's 4,096.
TEXT = " ".join(WORDS[i % len(WORDS)] for i in range(4000))


@pytest.fixture(scope="module")
def long_lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-4096")
    long_llama(folder, positions=4096, blocks=2, heads=4, hidden=64, sharpness=12)
    lab = LabProcess(folder, env={"ATTENTION_LAB_MODEL_PATH": str(folder)})
    lab.start()
    yield lab.url
    lab.stop()


@pytest.fixture
def long_page(browser, long_lab):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.goto(long_lab)
    wait_until(page, "document.querySelector('#heatmap').dataset.window")
    yield page
    context.close()
    assert errors == []


def cells(url: str, run_id: str, **params) -> np.ndarray:
    answer = httpx.get(f"{url}/api/runs/{run_id}/attention", params={"dtype": "float32", **params}, timeout=60)
    assert answer.status_code == 200, answer.text
    return decode_attention(answer.content, answer.headers)[0, 0]


def shown(page) -> dict:
    return page.evaluate(
        """() => { const h = document.getElementById('heatmap').heatmap;
        return {window: h.picture.window, pooling: h.picture.pooling, shape: h.picture.shape,
                values: Array.from(h.picture.values), title: h.title.textContent}; }"""
    )


def readout_value(page) -> float:
    return float(re.search(r"= (-?[0-9.]+)", page.locator("#heatmap-readout").inner_text()).group(1))


def test_a_4096_token_heatmap_overview_zoom_cursor_and_search(long_page, long_lab):
    page = long_page
    page.fill("#prompt", TEXT)
    page.press("#prompt", "Enter")
    wait_until(page, "document.body.dataset.run && document.querySelector('#heatmap').dataset.window === '0,0,4096'")
    wait_until(page, "document.querySelector('#heatmap').dataset.picture === 'max'")
    run_id = page.evaluate("document.body.dataset.run")
    layer, head = page.evaluate("[document.getElementById('layer').value, document.getElementById('head').value]")
    layer, head = int(layer), int(head)

    # The overview: the server's max-pooled cells, as the page holds them, said in the title.
    overview = shown(page)
    assert overview["shape"][-2:] == [512, 512] and overview["window"] == [0, 4096, 0, 4096]
    assert "max-pooled: a cell is the largest of 8×8" in overview["title"]
    pooled = cells(long_lab, run_id, layer=layer, head=head, size=512)
    assert np.array_equal(np.float32(overview["values"]), pooled.ravel())  # bit for bit: read back (the server's)
    screenshot(page, "80-long-context-overview-4096")

    # The attends view: the most attended keys listed, and the whole row as a strip.
    assert page.locator("#attends .attend-row").count() <= 64
    assert page.locator("#attends .attend-strip").count() == 1
    query = page.evaluate("Number(document.getElementById('heatmap').dataset.selectedRow)")
    row = cells(long_lab, run_id, layer=layer, head=head, rows=f"{query}:{query + 1}", cols="0:4096")[0]
    listed = page.locator("#attends .attend-row").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.index), Number(r.dataset.weight)])"
    )
    best = sorted(range(4096), key=lambda key: -row[key])[: len(listed)]
    assert sorted(index for index, _ in listed) == sorted(best)
    assert all(weight == pytest.approx(float(row[index]), abs=1e-7) for index, weight in listed)

    # Zoom in three times (4,096 → 512 tokens a side): exact cells, fetched within the target.
    for _ in range(3):
        page.click("#heatmap [data-zoom='+']")
    wait_until(page, "document.querySelector('#heatmap').dataset.picture === 'exact'")
    window = shown(page)
    r0, r1, c0, c1 = window["window"]
    assert r1 - r0 == 512 and c1 - c0 == 512 and "exact cells" in window["title"]
    exact = cells(long_lab, run_id, layer=layer, head=head, rows=f"{r0}:{r1}", cols=f"{c0}:{c1}")
    assert np.array_equal(np.float32(window["values"]).reshape(512, 512), exact)  # bit for bit: read back
    screenshot(page, "81-long-context-zoomed-exact")

    # The keyboard cursor reads exact cells: two steps right of where it starts.
    page.focus("#heatmap .hm-plot")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_until(page, "/= -?[0-9]/.test(document.getElementById('heatmap-readout').textContent)")
    cursor_row, cursor_col = map(int, page.evaluate("document.querySelector('#heatmap').dataset.cursor").split(","))
    want = cells(long_lab, run_id, layer=layer, head=head, rows=f"{cursor_row}:{cursor_row + 1}", cols="0:4096")
    assert readout_value(page) == pytest.approx(float(want[0, cursor_col]), abs=5e-5)

    # The token search jumps to a passage: a window around the hit of at least 4 px a cell, exact.
    page.fill("#token-query", "cat")
    page.press("#token-query", "Enter")
    wait_until(page, "document.getElementById('heatmap').heatmap.window.size <= 128")
    wait_until(page, "document.querySelector('#heatmap').dataset.picture === 'exact'")
    token = page.evaluate("Number(document.getElementById('heatmap').dataset.selectedRow)")
    row0, col0, size = map(int, page.evaluate("document.querySelector('#heatmap').dataset.window").split(","))
    assert page.evaluate(f"document.getElementById('heatmap').heatmap.labels[{token}]").startswith("cat")
    assert row0 <= token < row0 + size and col0 <= token < col0 + size
    assert page.evaluate("document.getElementById('heatmap').heatmap.cell") >= 4
    # The tooltip over the hit's own cell: its exact weight.
    box = page.locator("#heatmap .hm-canvas").bounding_box()
    cell = box["width"] / size
    page.mouse.move(box["x"] + (token - col0 + 0.5) * cell, box["y"] + (token - row0 + 0.5) * cell)
    tooltip = page.locator("#heatmap .hm-tooltip")
    number = lambda text: float(re.search(r"= (-?[0-9.]+)", text).group(1))  # noqa: E731
    wait_until(page, "/= -?[0-9]/.test(document.querySelector('#heatmap .hm-tooltip').textContent)")
    want = cells(long_lab, run_id, layer=layer, head=head, rows=f"{token}:{token + 1}", cols=f"{token}:{token + 1}")
    assert number(tooltip.inner_text()) == pytest.approx(float(want[0, 0]), abs=5e-5)
    screenshot(page, "82-long-context-search-jump")

    # The token strip shows the page of 512 chips that holds the selected token, and turns pages.
    chips = page.locator("#tokens .token")
    assert chips.count() == 512 and page.locator("#tokens-page span").inner_text() == "0–511"
    page.click("#tokens-page [aria-label='Next tokens']")
    expect(page.locator("#tokens-page span")).to_have_text("512–1023")
    assert chips.first.get_attribute("data-index") == "512"
    page.click('#tokens .token[data-index="512"]')
    wait_until(page, "document.getElementById('heatmap').dataset.selectedRow === '512'")
    # ← from the page's first chip selects the token before it, on the page before.
    page.locator("#tokens").focus()
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#tokens-page span")).to_have_text("0–511")
    expect(page.locator("#tokens .token[aria-selected='true']")).to_have_attribute("data-index", "511")
    screenshot(page, "83-long-context-token-pages")


def test_hidden_and_renormalised_the_overview_keeps_its_words_and_the_attends_view_says_shares(long_page, long_lab):
    """A long run's heatmap draws every key as computed (the filters apply to the attends view): under hide and
    renormalise its title and colour bar keep the weights' words, while the attends view, whose values are
    rescaled, calls them shares and its sink the hidden tokens' share of the row's total."""
    page = long_page
    page.fill("#prompt", TEXT)
    page.press("#prompt", "Enter")
    wait_until(page, "document.body.dataset.run && document.querySelector('#heatmap').dataset.window === '0,0,4096'")
    page.select_option("#sinks", "renormalise")
    wait_until(page, "document.querySelector('#attends [data-field=sink-hint]')")
    wait_until(page, "document.getElementById('attends').getAttribute('aria-busy') === 'false'")
    title = page.locator("#heatmap .hm-title").inner_text()
    assert title.startswith("block ") and "renormalised" not in title and "every key shown" in title
    colour_bar = page.locator("#heatmap .hm-colorbar").get_attribute("title")
    assert colour_bar == "attention weight: 0 to 1; each row sums to 1"
    caption = page.locator("#attends .caption").inner_text()
    assert caption.endswith("show the share of the kept tokens' attention weight on each token.")
    run_id = page.evaluate("document.body.dataset.run")
    layer, head = (int(page.input_value(f"#{name}")) for name in ("layer", "head"))
    query = page.evaluate("Number(document.getElementById('heatmap').dataset.selectedRow)")
    row = cells(long_lab, run_id, layer=layer, head=head, rows=f"{query}:{query + 1}", cols="0:4096")[0]
    tokens = httpx.post(f"{long_lab}/api/analyze", json={"text": TEXT}, timeout=60).json()["tokens"]
    hidden = np.array([token["added"] for token in tokens])
    assert hidden.any()
    row = row.astype(np.float64)
    sink = float(page.locator("#attends [data-field=sink] .attend-weight").get_attribute("data-value"))
    assert sink == pytest.approx(row[hidden].sum() / row.sum(), abs=1e-6)
    listed = page.locator("#attends .attend-row").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.index), Number(r.dataset.weight)])"
    )
    kept = row[~hidden].sum()
    assert all(weight == pytest.approx(row[index] / kept, abs=1e-6) for index, weight in listed)
