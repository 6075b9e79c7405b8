"""Long inputs (zoom, pan, search), difference views and image exports in chromium."""

import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

from tests.browser.conftest import save, screenshot, wait_until
from tests.browser.test_page import cell_centre, heatmap_z, open_lab, run_id, wait_view

pytestmark = pytest.mark.slow
LONG = " ".join(["the river bank"] * 120 + ["a heron waited"] + ["by the water"] * 60)


def test_a_512_token_heatmap_zooms_pans_and_finds_tokens(page, server, api):
    open_lab(page, server)
    page.fill("#prompt", LONG)
    page.press("#prompt", "Enter")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 512")
    wait_view(page, "heatmap", 0, 0, 1)
    assert page.locator("#heatmap").get_attribute("data-window") == "0,0,512"
    labelled = page.locator("#heatmap .hm-ylabels span").evaluate_all("s => s.map(x => Number(x.dataset.index))")
    assert 16 <= len(labelled) <= 60  # thinned to stay legible
    whole_gap = labelled[1] - labelled[0]
    page.fill("#token-query", "heron")
    page.press("#token-query", "Enter")
    heron = next(
        t["index"] for t in api.post("/api/analyze", json={"text": LONG}).json()["tokens"] if t["text"] == "heron"
    )
    wait_view(page, "heatmap", 0, 0, heron)
    assert f"token {heron} of 512" in page.locator("#token-search-status").inner_text()
    page.locator('#heatmap [data-zoom="+"]').click()
    page.locator('#heatmap [data-zoom="+"]').click()
    row, col, size = map(int, page.locator("#heatmap").get_attribute("data-window").split(","))
    assert size == 128 and row <= heron < row + size  # zoomed around the selected token
    shown = [int(n) for n in page.locator("#heatmap .hm-ylabels span").evaluate_all("s => s.map(x => x.dataset.index)")]
    assert shown[0] == row and all(row <= index < row + size for index in shown)  # the window's own labels
    assert shown[1] - shown[0] < whole_gap  # closer together than at full size
    assert page.locator("#heatmap .hm-outline").is_visible()
    page.mouse.move(*cell_centre(page, heron, col + 5))
    weights = np.array(api.get(f"/api/runs/{run_id(page)}/layers/0/heads/0").json()["weights"])
    assert f"A[{heron},{col + 5}] = {weights[heron, col + 5]:.4f}" in page.locator("#heatmap .hm-tooltip").inner_text()
    page.mouse.click(*cell_centre(page, row + 3, col + 3))
    wait_view(page, "heatmap", 0, 0, row + 3)
    canvas = page.locator("#heatmap .hm-canvas").bounding_box()
    page.mouse.move(canvas["x"] + 200, canvas["y"] + 200)
    page.mouse.down()
    page.mouse.move(canvas["x"] + 100, canvas["y"] + 150, steps=5)
    page.mouse.up()
    moved_row, moved_col, _ = map(int, page.locator("#heatmap").get_attribute("data-window").split(","))
    assert moved_col > col and moved_row > row  # dragged left and up: the window moved right and down
    screenshot(page, "30-512-zoomed", page.locator("#views"))
    page.locator('#heatmap [data-zoom="Reset"]').click()
    assert page.locator("#heatmap").get_attribute("data-window") == "0,0,512"
    np.testing.assert_allclose(heatmap_z(page), weights, atol=1e-7)


def test_difference_of_two_runs_and_a_clear_message_for_different_lengths(page, server, api):
    open_lab(page, server, "?layer=1&head=3&panel=lessons")
    page.locator("#lesson-tab-difference").click()
    page.locator("#difference-run").click()
    wait_until(page, "document.querySelector('#difference-map .hm-canvas')")
    text = page.locator("#prompt").input_value()
    a = api.post("/api/analyze", json={"text": text}).json()["run_id"]
    b = api.post("/api/analyze", json={"text": text, "mask": "causal"}).json()["run_id"]
    weights_a = np.array(api.get(f"/api/runs/{a}/layers/1/heads/3").json()["weights"])
    weights_b = np.array(api.get(f"/api/runs/{b}/layers/1/heads/3").json()["weights"])
    shown = page.evaluate(
        "() => { const h = document.getElementById('difference-map').heatmap; return [h.n, Array.from(h.matrix)]; }"
    )
    np.testing.assert_allclose(np.array(shown[1]).reshape(shown[0], shown[0]), weights_a - weights_b, atol=1e-6)
    assert "-" in page.locator("#difference-map .hm-colorbar-min").inner_text()  # a scale centred on zero
    page.locator("#lessons").scroll_into_view_if_needed()
    screenshot(page, "31-difference", page.locator("#lessons"))
    page.fill("#difference-b", "a much longer prompt than the first one by many words")
    page.locator("#difference-run").click()
    wait_until(page, "document.querySelector('#difference-result [data-field=mismatch]')")
    assert "needs the same number" in page.locator("#difference-result").inner_text()
    assert page.locator("#difference-map").count() == 0


def test_heatmap_exports_as_valid_png_and_svg(page, server):
    open_lab(page, server)
    page.fill("#prompt", '<b>bold</b> & "quoted"')
    page.press("#prompt", "Enter")
    wait_until(page, "document.body.dataset.busy === 'false' && document.querySelectorAll('#tokens .token').length > 8")
    wait_view(page, "heatmap", 0, 0, 1)
    with page.expect_download() as download:
        save(page, "export-png")
    assert open(download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as download:
        save(page, "export-svg")
    assert download.value.suggested_filename.endswith(".svg")
    svg = ElementTree.parse(download.value.path()).getroot()  # well-formed XML: labels are escaped
    texts = [node.text for node in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "< #1" in texts and "&" in texts and "block 0, head 0 · bidirectional mask" in texts  # "<" repeats
    image = next(svg.iter("{http://www.w3.org/2000/svg}image"))
    assert image.get("href").startswith("data:image/png;base64,")


def test_the_grid_exports_as_png_and_svg(page, server):
    open_lab(page, server, "?panel=grid")
    wait_view(page, "grid", 0, 0, 1)
    with page.expect_download() as download:
        page.click("#export-grid-png")
    assert open(download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as download:
        page.click("#export-grid-svg")
    svg = ElementTree.parse(download.value.path()).getroot()
    texts = [node.text for node in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "head 11" in texts and "block 5" in texts and any("bidirectional mask" in text for text in texts)


def test_the_overview_shows_each_heads_share_on_sinks(page, server, api):
    open_lab(page, server, "?panel=grid")
    page.fill("#prompt", "The bank was closed. We walked to the river instead.")
    page.press("#prompt", "Enter")
    wait_until(
        page, "document.body.dataset.busy === 'false' && document.querySelectorAll('#tokens .token').length === 14"
    )
    wait_view(page, "grid", 0, 0, 1)
    page.check("#grid-shares")
    wait_until(page, "document.querySelectorAll('#grid .grid-share').length === 72")
    stats = api.get(f"/api/runs/{run_id(page)}/head-stats").json()["heads"]
    for stat in stats[::7]:
        cell = page.locator(f'#grid .grid-cell[data-layer="{stat["layer"]}"][data-head="{stat["head"]}"]')
        assert float(cell.get_attribute("data-special")) == pytest.approx(stat["cls"] + stat["sep"])
        assert float(cell.get_attribute("data-period")) == pytest.approx(stat["period"])
        assert stat["period"] > 0  # two "." tokens in the text
    page.locator("#grid").scroll_into_view_if_needed()
    screenshot(page, "33-grid-shares", page.locator("#grid"))
    page.uncheck("#grid-shares")
    wait_until(page, "document.querySelectorAll('#grid .grid-share').length === 0")


def test_a_mean_view_at_512_tokens_downloads_one_matrix_not_every_head(page, server):
    """All heads averaged, then every block averaged: the server sends one 512×512 float32 matrix each
    (1 MB) where the page once fetched a block's 12 heads (12.6 MB) or all 72 (75 MB)."""
    attention = []
    page.on("response", lambda response: "/attention?" in response.url and attention.append(response))
    open_lab(page, server)
    page.fill("#prompt", LONG)
    page.press("#prompt", "Enter")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 512")
    with page.expect_response(lambda response: "heads=" in response.url):
        page.select_option("#head", "mean")
    with page.expect_response(lambda response: "blocks=mean" in response.url):
        page.check("#block-mean")
    sizes = {response.url.split("attention?")[1]: len(response.body()) for response in attention}
    means = [query for query in sizes if "heads=" in query or "blocks=mean" in query]
    assert len(means) == 2 and all(sizes[query] == 512 * 512 * 4 for query in means), sizes
    whole_blocks = [query for query in sizes if "layer=" in query and "head" not in query]
    assert whole_blocks == [], sizes
