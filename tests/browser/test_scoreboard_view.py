"""The faithfulness scoreboard in chromium: its grid shows /api/scoreboard's ρ, a head's keys show its numbers,
and the CSV holds every head's ρ as the API sent them."""

import csv
import io
import re

import numpy as np
import pytest

from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_lessons import cells, open_lesson

pytestmark = pytest.mark.slow

A, OTHER = "the bank of the river", "the bank raised rates"


def test_scoreboard_grid_equals_the_api_and_saves_as_csv(page, server, api):
    open_lesson(page, server, "scoreboard", f"?text={A.replace(' ', '+')}&token=2")
    assert page.locator("#scoreboard-other").input_value() == OTHER
    page.locator("#scoreboard-run").click()
    wait_until(page, "document.querySelectorAll('#scoreboard-result [data-grid=scoreboard] .patch-cell').length === 72")
    body = api.post("/api/scoreboard", json={"text": A, "other": OTHER, "query": 2}).json()
    grid = "#scoreboard-result [data-grid=scoreboard] .patch-cell"
    np.testing.assert_allclose(cells(page, f"{grid}[data-value]"), [h["agreement"]["weights"] for h in body["heads"]])
    page.locator("#scoreboard-colour").select_option("correlation:norm:alti")
    wait_until(page, "document.querySelector('[data-grid=scoreboard]').dataset.shows === 'correlation:norm:alti'")
    np.testing.assert_allclose(
        cells(page, f"{grid}[data-value]"), [h["correlations"]["norm:alti"] for h in body["heads"]]
    )
    assert "mean ρ over the 72 heads" in page.locator("#scoreboard-result [data-field=summary]").inner_text()
    assert "A large weight can move nothing" in page.locator("#scoreboard-result [data-field=unmoved]").inner_text()
    resolution = body["resolution"]
    assert 0 < resolution["float64"] < resolution["removals"] == 72 * len(body["keys"])
    said = page.locator("#scoreboard-result [data-field=resolution]").inner_text()
    least = float(re.search(r"under 64 times that \(([0-9.e+-]+)\)", said).group(1))
    assert least == pytest.approx(resolution["least_float32_effect"], rel=0.05)  # to 2 significant digits
    assert f"{resolution['float64']} of the {resolution['removals']} removals were run again" in said

    page.locator("#scoreboard-colour").select_option("agreement:weights")
    page.click("#panel-enlarge")  # the grid as a class sees it, over the whole stage, from its summary down
    page.evaluate("document.querySelector('#scoreboard-result [data-field=summary]').scrollIntoView({block: 'start'})")
    screenshot(page, "lesson-scoreboard")
    page.click("#panel-enlarge")
    page.locator(f'{grid}[data-layer="2"][data-head="5"]').click()
    wait_until(page, "document.querySelector('#scoreboard-detail [data-field=keys]')")
    head = body["heads"][2 * 12 + 5]
    for account in ("weights", "norm", "alti", "gradient", "intervention"):
        shown = cells(page, f'#scoreboard-detail td[data-account="{account}"]')
        np.testing.assert_allclose(shown, head["values"][account], rtol=1e-6)
    marked = page.locator('#scoreboard-detail td[data-account="intervention"]').evaluate_all(
        "cells => cells.flatMap((cell, at) => (cell.classList.contains('float64') ? [at] : []))"
    )
    assert marked == head["float64"]  # the keys run again in float64, and only those
    wait_until(page, "document.getElementById('layer').value === '2'")  # the head opens in the views above
    page.locator("#scoreboard-detail").scroll_into_view_if_needed()
    screenshot(page, "lesson-scoreboard-head")

    with page.expect_download() as download:
        page.locator("#scoreboard-csv").click()
    assert download.value.suggested_filename == "scoreboard-query-2.csv"
    lines = [line for line in open(download.value.path()).read().splitlines() if not line.lstrip('"').startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    assert len(rows) == 72
    for row, found in zip(rows, body["heads"], strict=True):
        assert (int(row["block"]), int(row["head"])) == (found["layer"], found["head"])
        assert float(row["agreement gradient"]) == found["agreement"]["gradient"]
        assert float(row["rho weights:alti"]) == found["correlations"]["weights:alti"]
