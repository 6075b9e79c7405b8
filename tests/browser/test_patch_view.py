"""The Patch experiment in chromium: its grids show /api/patch's numbers, and a cell opens the patched run."""

import numpy as np
import pytest

from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_lessons import cells, open_lesson

pytestmark = pytest.mark.slow

A, B = "the bank of the river", "the bank raised rates"


def test_patch_grids_equal_the_api_and_a_cell_opens_the_patched_run(page, server, api):
    open_lesson(page, server, "patch", f"?text={A.replace(' ', '+')}&token=2")
    assert page.locator("#patch-source").input_value() == B
    page.locator("#patch-run").click()
    wait_until(page, "document.querySelectorAll('#patch-result [data-grid=head] .patch-cell').length === 72")
    ask = {"text": A, "source": B, "align": "start"}
    positions = api.post("/api/patch", json={**ask, "site": "resid_pre", "sweep": "blocks_positions"}).json()
    heads = api.post("/api/patch", json={**ask, "site": "head", "sweep": "blocks_heads", "position": 2}).json()
    np.testing.assert_allclose(
        cells(page, "#patch-result [data-grid=position] .patch-cell[data-value]"),
        [cell["value"] for cell in positions["cells"]],
    )
    np.testing.assert_allclose(
        cells(page, "#patch-result [data-grid=head] .patch-cell"), [cell["value"] for cell in heads["cells"]]
    )
    assert page.locator("#patch-result [data-grid=position] .patch-cell.empty").count() == 6  # A's [SEP]: no partner
    assert page.locator("#patch-result [data-field=strongest] li").count() == 5
    assert page.locator("#patch-result .patch-cell.cone").count() > 1  # the strongest cell's cone is shaded
    page.click("#panel-enlarge")  # the grids as a class sees them, over the whole stage
    page.mouse.move(0, 0)  # no cell under the pointer: the strongest cell's cone is the one shaded
    page.locator("#patch-result [data-grid=position]").scroll_into_view_if_needed()
    screenshot(page, "lesson-patch")
    page.click("#panel-enlarge")

    cell = next(c for c in positions["cells"] if c["layer"] == 3 and c["positions"] == [2])
    page.locator('#patch-result [data-grid=position] .patch-cell[data-layer="3"][data-position="2"]').click()
    patch = {"source": B, **{key: cell[key] for key in ("site", "layer", "head", "positions", "sources")}}
    expected = api.post("/api/analyze", json={"text": A, "patch": patch}).json()
    wait_until(page, f"document.body.dataset.run === '{expected['run_id']}' && document.body.dataset.busy === 'false'")
    assert "Patched run" in page.locator("#notice").inner_text()
    assert "patch=" in page.url
    screenshot(page, "patched-run", page.locator("main"))
    # The link opens the same patched run.
    page.goto(page.url)
    wait_until(page, f"document.body.dataset.run === '{expected['run_id']}' && document.body.dataset.busy === 'false'")


def test_predict_first_hides_the_grid_until_the_guess(page, server, api):
    open_lesson(page, server, "patch", f"?text={A.replace(' ', '+')}&token=2&predict=1")
    page.locator("#patch-run").click()
    wait_until(page, "document.querySelector('#patch-result [data-field=predict]')")
    grid = page.locator("#patch-result [data-grid=position]")
    assert grid.locator("button.patch-cell").count() == 36 and grid.locator("[data-value]").count() == 0
    assert page.locator("#patch-result [data-grid=head]").count() == 0  # nothing else shown before the guess
    screenshot(page, "lesson-patch-predict-open", page.locator("#patch-result"))
    grid.locator('.patch-cell[data-layer="3"][data-position="2"]').click()
    wait_until(page, "document.querySelector('#patch-result [data-field=guess]')")
    answer = api.post(
        "/api/patch", json={"text": A, "source": B, "align": "start", "site": "resid_pre", "sweep": "blocks_positions"}
    ).json()
    a, b = answer["a"]["value"], answer["b"]["value"]
    ranked = sorted(answer["cells"], key=lambda cell: -(cell["value"] - a) / (b - a))
    guess = next(i for i, cell in enumerate(ranked) if cell["layer"] == 3 and cell["positions"] == [2])
    assert page.locator("#patch-result [data-field=guess]").get_attribute("data-rank") == str(guess + 1)
    assert page.locator("#patch-result [data-grid=position] [data-value]").count() == 36
    screenshot(page, "lesson-patch-predict", page.locator("#patch-result [data-field=guess]"))
