"""The lab page in Debian's chromium against a live server: every number shown equals the API's."""

import csv
import io
import json
from pathlib import Path
from urllib.parse import parse_qs, urlparse
from xml.etree import ElementTree

import numpy as np
import pytest
import torch
from playwright.sync_api import expect

from tests.browser.conftest import open_panel, save, screenshot, wait_until

pytestmark = pytest.mark.slow
SVG = "{http://www.w3.org/2000/svg}"
DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"
# The attends view's lines: [y1, y2, stroke-width] each, in rows (a row's middle at index + 0.5).
LINES = (
    "[...document.querySelectorAll('#attends .attend-lines line')]"
    ".map((l) => ['y1', 'y2', 'stroke-width'].map((a) => Number(l.getAttribute(a))))"
)


def run_id(page) -> str:
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    return page.evaluate("document.body.dataset.run")


def wait_view(page, view: str, layer, head, token):
    key = f"{run_id(page)}:{layer}:{head}:{'null' if token is None else token}"
    page.wait_for_selector(f'#{view}[data-view="{key}"]', timeout=20_000)


def heatmap_z(page) -> np.ndarray:
    n, values = page.evaluate("(h => [h.n, Array.from(h.matrix)])(document.getElementById('heatmap').heatmap)")
    return np.array(values).reshape(n, n)


def cell_centre(page, row, col):
    page.locator("#heatmap .hm-canvas").scroll_into_view_if_needed()
    return page.evaluate(
        """([row, col]) => {
          const h = document.getElementById('heatmap').heatmap, box = h.canvas.getBoundingClientRect();
          return [box.left + (col - h.window.col + 0.5) * h.cell, box.top + (row - h.window.row + 0.5) * h.cell];
        }""",
        [row, col],
    )


def api_head(api, run, layer, head):
    return api.get(f"/api/runs/{run}/layers/{layer}/heads/{head}").json()


def open_lab(page, server, query=""):
    page.goto(f"{server}/{query}")
    run_id(page)


def test_page_runs_the_default_prompt_and_chips_match_the_api(page, server, api):
    open_lab(page, server)
    expected = api.post("/api/analyze", json={"text": DEFAULT_TEXT}).json()["tokens"]
    chips = page.locator("#tokens .token")
    assert chips.count() == len(expected)
    texts = chips.locator(".token-text").all_inner_texts()
    ids = [int(chip.get_attribute("data-id")) for chip in chips.all()]
    assert texts == [token["label"] for token in expected]
    assert ids == [token["id"] for token in expected]
    special = [chip.get_attribute("data-special") == "true" for chip in chips.all()]
    assert special == [token["special"] for token in expected]
    open_panel(page, "grid")
    wait_view(page, "grid", 0, 0, 1)
    assert page.locator("#grid .grid-cell").count() == 72
    assert page.locator("#error").is_hidden()  # no view failed on the way
    screenshot(page, "01-lab-default")


def test_clicking_a_token_shows_its_row_and_the_dissection_numbers(page, server, api):
    open_lab(page, server, "?layer=2&head=5&panel=dissection")
    page.locator('#tokens .token[data-index="10"]').click()  # "it"
    wait_view(page, "heatmap", 2, 5, 10)
    wait_view(page, "attends", 2, 5, 10)
    wait_view(page, "dissection", 2, 5, 10)
    run = run_id(page)
    head = api_head(api, run, 2, 5)
    weights = np.array(head["weights"])
    assert page.locator("#heatmap").get_attribute("data-selected-row") == "10"
    row_top = cell_centre(page, 10, 0)[1]
    outline = page.locator("#heatmap .hm-outline").bounding_box()
    assert outline["y"] < row_top < outline["y"] + outline["height"]
    np.testing.assert_allclose(heatmap_z(page), weights, atol=1e-7)
    page.mouse.move(*cell_centre(page, 10, 2))
    assert f"A[10,2] = {weights[10, 2]:.4f}" in page.locator("#heatmap .hm-tooltip").inner_text()
    assert "“it” (10)" in page.locator("#heatmap .hm-tooltip").inner_text()
    bars = page.locator("#attends .attend-row")
    shown = [float(row.get_attribute("data-weight")) for row in bars.all()]
    np.testing.assert_allclose(shown, weights[10], atol=1e-7)
    # A line from the query's row to each key's it reads (those past 0.5% of the largest), as wide as its weight.
    lines = np.array(page.evaluate(LINES))
    drawn = weights[10] >= 0.005 * weights[10].max()
    assert (lines[:, 0] == 10.5).all() and (lines[:, 1] - 0.5 == np.flatnonzero(drawn)).all()
    np.testing.assert_allclose(lines[:, 2], 0.5 + 5 * weights[10][drawn] / weights[10].max(), atol=1e-5)
    q = [
        float(v)
        for v in page.locator('#dissection [data-field="q"] .num').evaluate_all("n => n.map(x => x.dataset.value)")
    ]
    np.testing.assert_allclose(q, head["q"][10], atol=1e-7)
    context = page.locator('#dissection [data-field="context"] .num').evaluate_all("n => n.map(x => x.dataset.value)")
    np.testing.assert_allclose([float(v) for v in context], head["context"][10], atol=1e-7)
    top = int(page.locator('#dissection [data-field="top-key"]').get_attribute("data-index"))
    assert top == int(np.argmax(weights[10]))
    k = np.array(head["k"][top])
    dot = float(page.locator('#dissection [data-field="dot"]').get_attribute("data-value"))
    assert dot == pytest.approx(float(np.dot(head["q"][10], k)), abs=1e-4)
    score = float(page.locator('#dissection [data-field="score"]').get_attribute("data-value"))
    assert score == pytest.approx(head["scores"][10][top], abs=1e-6)
    assert page.locator("#dissection").inner_text().count("0.") > 50
    screenshot(page, "02-dissection", page.locator("#dissection"))
    screenshot(page, "03-attention", page.locator("#views"))


def test_switching_layer_and_head_and_averaging(page, server, api):
    open_lab(page, server)
    page.select_option("#layer", "4")
    page.select_option("#head", "7")
    wait_view(page, "heatmap", 4, 7, 1)
    run = run_id(page)
    np.testing.assert_allclose(heatmap_z(page), api_head(api, run, 4, 7)["weights"], atol=1e-7)
    page.select_option("#head", "mean")
    wait_view(page, "heatmap", 4, "mean", 1)
    mean = np.mean([api_head(api, run, 4, h)["weights"] for h in range(12)], axis=0)
    np.testing.assert_allclose(heatmap_z(page), mean, atol=1e-6)
    query = parse_qs(urlparse(page.url).query)
    assert query["layer"] == ["4"] and query["head"] == ["mean"]


def test_clicking_a_heatmap_cell_selects_its_query_token(page, server):
    open_lab(page, server)
    wait_view(page, "heatmap", 0, 0, 1)
    page.mouse.click(*cell_centre(page, 6, 3))
    wait_view(page, "heatmap", 0, 0, 6)
    assert page.locator('#tokens .token[data-index="6"]').get_attribute("aria-selected") == "true"


def test_grid_cell_opens_that_head(page, server, api):
    open_lab(page, server, "?panel=grid")
    wait_view(page, "grid", 0, 0, 1)
    page.locator('#grid .grid-cell[data-layer="3"][data-head="9"]').click()
    wait_view(page, "heatmap", 3, 9, 1)
    assert page.locator("#layer").input_value() == "3" and page.locator("#head").input_value() == "9"
    assert page.locator("#grid .grid-cell.current").get_attribute("data-head") == "9"
    np.testing.assert_allclose(heatmap_z(page), api_head(api, run_id(page), 3, 9)["weights"], atol=1e-7)
    screenshot(page, "04-grid", page.locator("#grid"))
    # Saved (grid.js's sheet): each head its own square picture in the SVG, the PNG as large as the SVG.
    model = "JSON.parse(document.getElementById('lab-config').textContent).model"
    layers, heads = page.evaluate(f"(m => [m.layers, m.heads])({model})")
    with page.expect_download() as svg_download:
        page.click("#export-grid-svg")
    assert svg_download.value.suggested_filename == "attention-grid.svg"
    svg = ElementTree.parse(svg_download.value.path()).getroot()
    images = [node for node in svg.iter(f"{SVG}image") if node.get("class") == "head"]
    assert len(images) == layers * heads
    assert {(node.get("width"), node.get("height")) for node in images} == {("72", "72")}
    texts = {node.text for node in svg.iter(f"{SVG}text")}
    assert {f"head {heads - 1}", f"block {layers - 1}"} <= texts and svg.find(f"{SVG}title").text in texts
    with page.expect_download() as png_download:
        page.click("#export-grid-png")
    png = Path(png_download.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    size = [int.from_bytes(png[at : at + 4], "big") for at in (16, 20)]
    assert size == [int(svg.get("width")), int(svg.get("height"))]


def test_the_tour_walks_every_step_and_sets_what_a_step_shows(page, server):
    """The page's own tour, walked with Next: each step's counter and outlined view, no text the page failed to
    fill, the last step opening its lesson, Finish closing the box."""
    open_lab(page, server)
    page.click("#tour-start")
    total = int(page.locator("#tour-counter").inner_text().split(" of ")[1])
    for number in range(1, total + 1):
        expect(page.locator("#tour-counter")).to_have_text(f"Step {number} of {total}")
        expect(page.locator(".tour-focus")).to_have_count(1)
        said = page.locator("#tour").inner_text()
        assert not any(bad in said for bad in ["undefined", "NaN", "null", "[object"]), f"step {number}: {said}"
        page.click("#tour-next")
    assert parse_qs(urlparse(page.url).query).get("lesson") == ["explain"]
    expect(page.locator("#tour")).to_be_hidden()


def test_causal_mask_shows_upper_triangle_zeros(page, server):
    open_lab(page, server)
    page.select_option("#mask", "causal")
    wait_until(
        page, "document.body.dataset.busy === 'false' && new URLSearchParams(location.search).get('mask') === 'causal'"
    )
    page.select_option("#layer", "1")
    wait_view(page, "heatmap", 1, 0, 1)
    z = heatmap_z(page)
    assert np.all(np.triu(z, 1) == 0)
    np.testing.assert_allclose(z.sum(1), 1, atol=1e-5)
    assert "causal" in page.locator("#heatmap .hm-title").inner_text()
    screenshot(page, "05-causal", page.locator("#views"))


def test_a_shared_url_opens_the_same_view(page, server, browser):
    open_lab(page, server)
    page.fill("#prompt", "the river bank flooded")
    page.press("#prompt", "Enter")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 6")
    page.select_option("#layer", "5")
    page.select_option("#head", "2")
    page.select_option("#pooling", "max")
    wait_until(
        page, "new URLSearchParams(location.search).get('pooling') === 'max' && document.body.dataset.busy === 'false'"
    )
    page.locator('#tokens .token[data-index="3"]').click()
    wait_view(page, "heatmap", 5, 2, 3)
    shared = page.url
    other = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        other.goto(shared)
        wait_until(other, "document.body.dataset.run && document.body.dataset.busy === 'false'")
        key = f"{other.evaluate('document.body.dataset.run')}:5:2:3"
        other.wait_for_selector(f'#heatmap[data-view="{key}"]')
        assert other.locator("#prompt").input_value() == "the river bank flooded"
        assert other.locator("#pooling").input_value() == "max"
        assert other.locator('#tokens .token[aria-selected="true"]').get_attribute("data-index") == "3"
        open_panel(other, "pooled")
        other.wait_for_selector('#pooled [data-field="strategy"]')
        assert other.locator('#pooled [data-field="strategy"]').text_content() == "max"
        np.testing.assert_array_equal(heatmap_z(other), heatmap_z(page))  # bit for bit: read back (the same run)
    finally:
        other.close()


def test_keyboard_moves_and_clears_the_selection(page, server):
    open_lab(page, server)
    wait_view(page, "heatmap", 0, 0, 1)
    page.locator("#tokens").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_view(page, "heatmap", 0, 0, 3)
    page.keyboard.press("ArrowLeft")
    wait_view(page, "heatmap", 0, 0, 2)
    page.keyboard.press("Escape")
    wait_view(page, "heatmap", 0, 0, None)
    assert page.locator('#tokens .token[aria-selected="true"]').count() == 0
    assert "token" not in parse_qs(urlparse(page.url).query)


@pytest.mark.parametrize("prompt", ["<img src=x onerror=alert(1)>", '<script>alert("x")</script> & "quotes"'])
def test_html_in_a_prompt_is_shown_as_text(page, server, prompt):
    open_lab(page, server)
    page.fill("#prompt", prompt)
    page.click("#run")
    wait_until(page, "document.body.dataset.busy === 'false'")
    wait_until(page, "document.querySelectorAll('#tokens .token').length > 5")
    assert page.locator("img[src=x]").count() == 0 and page.locator("main script").count() == 0
    assert "<" in page.locator("#tokens").inner_text()
    assert page.title() == "Attention Lab"
    page.wait_for_timeout(300)
    screenshot(page, "06-html-prompt", page.locator("#tokens"))


def test_errors_are_explained_in_plain_words(page, server):
    open_lab(page, server)
    page.fill("#prompt", "   ")
    page.click("#run")
    assert page.locator("#error").inner_text() == "Type some text first."
    page.fill("#prompt", "bank " * 700)
    page.click("#run")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 512")
    assert page.locator("#error").is_hidden()
    assert "Cut to the first 512 tokens (the model's limit)" in page.locator("#notice").inner_text()
    wait_view(page, "heatmap", 0, 0, 1)
    open_panel(page, "grid")
    wait_view(page, "grid", 0, 0, 1)
    screenshot(page, "07-512-tokens")


@pytest.mark.parametrize("mode", ["renormalise", "hide"])
def test_hiding_special_tokens_keeps_their_weight_as_a_sink(page, server, api, mode):
    open_lab(page, server, "?layer=3&head=4&token=5")
    page.select_option("#sinks", mode)
    wait_view(page, "attends", 3, 4, 5)
    page.wait_for_selector('#attends [data-field="sink"]')
    weights = np.array(api_head(api, run_id(page), 3, 4)["weights"])[5]
    special = [0, len(weights) - 1]
    kept = np.delete(weights, special)
    rows = page.locator("#attends .attend-row")
    shown = [float(row.get_attribute("data-weight")) for row in rows.all()]
    np.testing.assert_allclose(shown, kept / kept.sum() if mode == "renormalise" else kept, atol=1e-6)
    sink = float(page.locator('#attends [data-field="sink"] .attend-weight').get_attribute("data-value"))
    assert sink == pytest.approx(weights[special].sum(), abs=1e-6)
    assert parse_qs(urlparse(page.url).query)["sinks"] == [mode]
    matrix = np.array(api_head(api, run_id(page), 3, 4)["weights"])
    wait_until(page, "document.getElementById('heatmap').dataset.sink")
    sink = np.array([float(v) for v in page.locator("#heatmap").get_attribute("data-sink").split(",")])
    np.testing.assert_allclose(sink, matrix[:, special].sum(1), atol=1e-6)  # the sink column, row by row
    shown_matrix = heatmap_z(page)
    assert np.isnan(shown_matrix[:, special]).all()
    kept_rows = np.nansum(shown_matrix, 1)
    np.testing.assert_allclose(kept_rows, 1 if mode == "renormalise" else 1 - sink, atol=1e-5)
    page.check("#all-heads")
    wait_until(page, "document.querySelectorAll('#attends .legend-item').length === 12")
    assert page.locator('#attends [data-field="sink"] .sink-bar').count() == 12
    screenshot(page, f"08-all-heads-{mode}", page.locator("#views"))


def test_pipeline_and_pooled_vector_show_the_apis_numbers(page, server, api):
    open_lab(page, server, "?token=2&panel=pipeline")
    wait_view(page, "pipeline", 0, 0, 2)
    run = run_id(page)
    trace = api.get(f"/api/runs/{run}/tokens/2").json()
    page.locator("#pipeline").scroll_into_view_if_needed()  # panels below the fold render when seen
    expect(page.locator("#pipeline")).to_contain_text("id 4111 → row 4111", use_inner_text=True)  # "animal"
    text = page.locator("#pipeline").inner_text()
    assert f"{np.linalg.norm(trace['embeddings']['word']):.3f}" in text
    assert f"{np.linalg.norm(trace['layers'][5]['output']):.3f}" in text
    screenshot(page, "09-pipeline", page.locator("#pipeline"))
    analyzed = api.post("/api/analyze", json={"text": DEFAULT_TEXT}).json()
    open_panel(page, "pooled")
    page.wait_for_selector('#pooled [data-field="norm"]')
    norm = float(page.locator('#pooled [data-field="norm"]').get_attribute("data-value"))
    assert norm == pytest.approx(analyzed["pooled"]["norm"], rel=1e-6)
    page.wait_for_selector("#pooled .pooled-chart .main-svg")
    assert "null" not in page.locator("#pooled").inner_text()  # a short prompt: no line about the cut
    screenshot(page, "10-pooled", page.locator("#pooled"))


def test_exports_are_valid_files_with_the_views_numbers(page, server, api):
    open_lab(page, server, "?layer=1&head=6")
    wait_view(page, "heatmap", 1, 6, 1)
    weights = np.array(api_head(api, run_id(page), 1, 6)["weights"])
    with page.expect_download() as download:
        save(page, "export-json")
    assert download.value.suggested_filename == "attention-weights-block1-head6.json"
    exported = json.loads(open(download.value.path()).read())
    assert (exported["view"]["layer"], exported["view"]["head"], exported["mask"], exported["text"]) == (
        1,
        6,
        "bidirectional",
        DEFAULT_TEXT,
    )
    assert exported["view"]["name"] == "block 1, head 6 · bidirectional mask"
    np.testing.assert_allclose(exported["matrix"], weights, atol=1e-7)
    with page.expect_download() as download:
        save(page, "export-csv")
    rows = [row for row in csv.reader(io.StringIO(open(download.value.path()).read())) if not row[0].startswith("#")]
    np.testing.assert_allclose(np.array([r[1:] for r in rows[1:]], dtype=float), weights, atol=1e-7)
    with page.expect_download() as download:
        save(page, "export-png")
    assert open(download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_presentation_mode(page, server):
    open_lab(page, server, "?token=10&layer=2&head=5")
    page.click("#present")
    assert "present" in page.evaluate("document.body.className")
    assert parse_qs(urlparse(page.url).query)["present"] == ["1"]
    wait_view(page, "heatmap", 2, 5, 10)
    screenshot(page, "11-presentation")


HOSTILE = "<img src=x onerror=alert(1)> <script>alert('x')</script> =SUM(A1) & \"quotes\""


def test_html_and_formulas_in_a_prompt_stay_text_everywhere(page, server):
    open_lab(page, server, "?panel=dissection")
    scripts_before = page.locator("script").count()
    page.fill("#prompt", HOSTILE)
    page.click("#run")
    wait_until(
        page, "document.body.dataset.busy === 'false' && document.querySelectorAll('#tokens .token').length > 20"
    )
    wait_view(page, "heatmap", 0, 0, 1)
    wait_view(page, "dissection", 0, 0, 1)
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == scripts_before
    assert page.title() == "Attention Lab"
    assert "<" in page.locator("#tokens").inner_text()
    assert "<" in page.locator("#heatmap .hm-ylabels").inner_text()
    # The column the keyboard's cursor is on always has its label: token 1's, "<".
    page.focus("#heatmap .hm-plot")
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    assert "< #1" in page.locator("#heatmap .hm-xlabels").text_content()
    page.mouse.move(*cell_centre(page, 1, 1))  # token 1 is "<"
    assert "“< #1” (1)" in page.locator("#heatmap .hm-tooltip").inner_text()  # "<" repeats: its position
    assert "<" in page.locator("#attends").inner_text()
    assert "<" in page.locator("#dissection").text_content()
    assert page.locator("#prompt").input_value() == HOSTILE
    with page.expect_download() as download:
        save(page, "export-csv")
    rows = list(csv.reader(io.StringIO(open(download.value.path()).read())))
    assert rows[0] == [f"# prompt: {HOSTILE}"]  # one cell, commas and quotes kept inside it
    assert rows[2][1:3] == ["[CLS]", "< #1"]
    with page.expect_download() as download:
        save(page, "export-json")
    assert json.loads(open(download.value.path()).read())["text"] == HOSTILE
    screenshot(page, "12-hostile-prompt", page.locator("#views"))


def test_the_first_heatmap_comes_in_the_analyze_answer(page, server, minilm):
    """One round trip from Enter to the first heatmap: the analyze request asks for the matrix the view
    draws, and no request for it follows. Its numbers are the model's own weights."""
    page.goto(f"{server}/?layer=2&head=5")
    run_id(page)
    text = "the first heatmap needs no second round trip"
    page.requests.clear()
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    wait_until(page, f"document.getElementById('heatmap').dataset.view?.startsWith('{run_id(page)}:2:5:')")
    assert [url for url in page.requests if "/attention" in url] == []
    encoded = minilm.tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        weights = minilm.model(**encoded, output_attentions=True).attentions[2][0, 5].numpy()
    np.testing.assert_allclose(heatmap_z(page), weights, atol=1e-6)
