"""Hover previews, click locks, shift-click multi-selection."""

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.browser.conftest import wait_until
from tests.browser.test_page import api_head, open_lab, run_id, wait_view

pytestmark = pytest.mark.slow


def shown_row(page):
    return np.array([float(row.get_attribute("data-weight")) for row in page.locator("#attends .attend-row").all()])


def test_hover_previews_click_locks_and_shift_click_sums_rows(page, server, api):
    open_lab(page, server, "?layer=2&head=5")
    wait_view(page, "attends", 2, 5, 1)
    weights = np.array(api_head(api, run_id(page), 2, 5)["weights"])
    page.locator('#tokens .token[data-index="4"]').hover()
    wait_until(page, "document.getElementById('heatmap').dataset.selectedRow === '4'")
    wait_until(page, "document.querySelector('#attends .caption').textContent.includes('preview')")
    np.testing.assert_allclose(shown_row(page), weights[4], atol=1e-7)
    page.mouse.move(5, 5)  # off the strip: back to the locked token
    wait_until(page, "document.getElementById('heatmap').dataset.selectedRow === '1'")
    wait_until(page, "!document.querySelector('#attends .caption').textContent.includes('preview')")
    np.testing.assert_allclose(shown_row(page), weights[1], atol=1e-7)

    page.locator('#tokens .token[data-index="6"]').click()
    page.locator('#tokens .token[data-index="9"]').click(modifiers=["Shift"])
    page.locator('#tokens .token[data-index="12"]').click(modifiers=["Shift"])
    page.mouse.move(5, 5)
    wait_until(page, "document.getElementById('heatmap').dataset.alsoRows === '9,12'")
    wait_until(page, "document.querySelector('#attends .caption').textContent.startsWith('3 tokens')")
    np.testing.assert_allclose(shown_row(page), weights[[6, 9, 12]].sum(0) / 3, atol=1e-6)
    assert shown_row(page).sum() == pytest.approx(1.0, abs=1e-5)
    assert page.locator("#heatmap .hm-outline.also:not([hidden])").count() == 2
    assert page.locator('#tokens .token[aria-selected="true"]').count() == 3
    query = parse_qs(urlparse(page.url).query)
    assert query["token"] == ["6"] and query["with"] == ["9,12"]

    page.locator('#tokens .token[data-index="9"]').click(modifiers=["Shift"])  # shift-click again: out
    page.mouse.move(5, 5)
    wait_until(page, "document.getElementById('heatmap').dataset.alsoRows === '12'")
    page.locator('#tokens .token[data-index="6"]').click()  # a plain click on the locked token: unlock
    page.mouse.move(5, 5)
    wait_until(page, "document.getElementById('heatmap').dataset.selectedRow === ''")
    assert page.locator('#tokens .token[aria-selected="true"]').count() == 0
