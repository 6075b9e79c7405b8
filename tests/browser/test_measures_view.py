"""The measure switch redraws the heatmap, the attends view and the grid with what attention moves, and
the "Is attention explanation?" experiment ranks the keys four ways with the API's numbers."""

import numpy as np
import pytest
from playwright.sync_api import expect

from app.web.encoding import decode_attention
from tests.browser.conftest import open_panel, screenshot, wait_until
from tests.browser.test_page import heatmap_z, run_id, wait_view

pytestmark = pytest.mark.slow


def served(api, run, measure, layer):
    response = api.get(f"/api/runs/{run}/attention", params={"measure": measure, "dtype": "float32", "layer": layer})
    return decode_attention(response.content, response.headers)[0]


def spearman(a, b) -> float:
    def ranks(values):
        order = np.argsort(-np.asarray(values), kind="stable")
        rank = np.empty(len(values))
        rank[order] = np.arange(1, len(values) + 1)
        for value in np.unique(values):  # ties share their mean rank
            tied = np.asarray(values) == value
            rank[tied] = rank[tied].mean()
        return rank

    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


@pytest.mark.parametrize("measure", ["norm", "alti", "alti_rollout"])
def test_the_measure_switch_redraws_the_views_with_the_servers_numbers(page, server, api, measure):
    page.goto(f"{server}/?layer=2&head=5&token=3")
    wait_view(page, "heatmap", 2, 5, 3)
    page.select_option("#measure", measure)
    wait_until(page, f"new URLSearchParams(location.search).get('measure') === '{measure}'")
    label = "norm" if measure == "norm" else "ALTI"
    wait_until(page, f"document.querySelector('#heatmap .hm-title').textContent.includes('{label}')")
    run = run_id(page)
    expected = served(api, run, measure, 2)[5 if measure == "norm" else 0]
    wait_until(page, "document.body.dataset.busy === 'false'")
    page.wait_for_timeout(300)
    np.testing.assert_allclose(heatmap_z(page), expected, rtol=1e-5, atol=1e-6)
    rows = page.locator("#attends .attend-row")
    shown = {int(row.get_attribute("data-index")): float(row.get_attribute("data-weight")) for row in rows.all()}
    for key, value in shown.items():
        assert value == pytest.approx(expected[3, key], rel=1e-5, abs=1e-6)
    open_panel(page, "grid")
    wait_until(page, f"document.querySelectorAll('#grid .grid-cell').length === {72 if measure == 'norm' else 6}")
    screenshot(page, f"measure-{measure}", page.locator("#views"))


def test_is_attention_explanation(page, server, api):
    page.goto(f"{server}/?layer=2&head=5&token=3&panel=lessons&lesson=explain")
    wait_until(page, "document.querySelector('#explain-result [data-field=correlations]')", timeout=60)
    run = run_id(page)
    tokens = api.get(f"/api/runs/{run}/head-stats")  # the run is kept: its numbers are the page's
    assert tokens.status_code == 200
    weights = served(api, run, "weights", 2)[5, 3]
    norms = served(api, run, "norm", 2)[5, 3]
    alti = served(api, run, "alti_rollout", 2)[0, 3]
    shown = {
        cell.get_attribute("data-measure"): float(cell.get_attribute("data-rho"))
        for cell in page.locator("#explain-result [data-field=correlations] strong").all()
    }
    assert shown["norm"] == pytest.approx(spearman(weights, norms), abs=1e-6)
    assert shown["alti_rollout"] == pytest.approx(spearman(weights, alti), abs=1e-6)
    assert -1 <= shown["attribution"] <= 1
    expect(page.locator("#explain-result [data-field=disagreement]")).to_contain_text("“")
    page.click("#panel-enlarge")
    page.locator("#explain-result").scroll_into_view_if_needed()
    screenshot(page, "lesson-explain", page.locator("#lessons"))
