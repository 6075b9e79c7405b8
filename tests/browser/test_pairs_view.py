"""Sentence pairs on the page: segment B in the strip, and the A/B filters in the views."""

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_page import heatmap_z, open_lab, run_id, wait_view

pytestmark = pytest.mark.slow


def test_a_sentence_pair_shows_its_boundary_and_filters_attention(page, server, api):
    open_lab(page, server)
    page.fill("#prompt", "the river bank")
    page.locator("#pair-box summary").click()
    page.fill("#prompt-pair", "it was steep")
    page.press("#prompt-pair", "Enter")
    wait_until(
        page, "document.querySelectorAll('#tokens .token').length === 9 && document.body.dataset.busy === 'false'"
    )
    expected = api.post("/api/analyze", json={"text": "the river bank", "text_pair": "it was steep"}).json()["tokens"]
    segments = [chip.get_attribute("data-segment") for chip in page.locator("#tokens .token").all()]
    assert segments == [token["segment"] for token in expected] == ["A"] * 5 + ["B"] * 4
    assert page.locator("#tokens .segment-boundary").count() == 1
    assert parse_qs(urlparse(page.url).query)["pair"] == ["it was steep"]
    wait_view(page, "heatmap", 0, 0, 1)
    weights = np.array(api.get(f"/api/runs/{run_id(page)}/layers/0/heads/0").json()["weights"])
    np.testing.assert_allclose(heatmap_z(page), weights, atol=1e-7)

    page.select_option("#segments", "AB")
    wait_until(page, "document.getElementById('heatmap').heatmap.matrix.some(Number.isNaN)")
    shown = heatmap_z(page)
    a, b = slice(0, 5), slice(5, 9)
    np.testing.assert_allclose(shown[a, b], weights[a, b], atol=1e-7)  # A queries on B keys kept
    assert np.isnan(shown[a, a]).all() and np.isnan(shown[b, :]).all()  # the rest left out, not zeroed
    wait_view(page, "attends", 0, 0, 1)
    keys = [int(row.get_attribute("data-index")) for row in page.locator("#attends .attend-row").all()]
    assert keys == [5, 6, 7, 8]
    np.testing.assert_allclose(
        [float(row.get_attribute("data-weight")) for row in page.locator("#attends .attend-row").all()], weights[1, b]
    )
    page.locator('#tokens .token[data-index="6"]').click()  # a B token under an A→B filter
    wait_view(page, "attends", 0, 0, 6)
    assert "queries in segment A" in page.locator("#attends").inner_text()
    screenshot(page, "32-sentence-pair", page.locator("main"))
