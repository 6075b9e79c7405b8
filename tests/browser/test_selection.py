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


def test_combining_chosen_heads(page, server, api):
    open_lab(page, server, "?layer=3&head=mean&token=2")
    wait_view(page, "heatmap", 3, "mean", 2)
    run = run_id(page)
    per_head = np.array([api_head(api, run, 3, h)["weights"] for h in range(12)])
    np.testing.assert_allclose(heatmap(page), per_head.mean(0), atol=1e-6)
    assert page.locator("#head-set .head-toggle[aria-pressed=true]").count() == 12
    page.locator('#head-set .head-toggle[data-head="4"]').dblclick()  # keep only head 4
    wait_until(page, "document.querySelectorAll('#head-set .head-toggle[aria-pressed=true]').length === 1")
    page.locator('#head-set .head-toggle[data-head="7"]').click()
    page.locator('#head-set .head-toggle[data-head="9"]').click()
    wait_until(page, "document.querySelectorAll('#head-set .head-toggle[aria-pressed=true]').length === 3")
    wait_until(page, "document.querySelector('#heatmap .hm-title').textContent.includes('heads 4, 7, 9 averaged')")
    np.testing.assert_allclose(heatmap(page), per_head[[4, 7, 9]].mean(0), atol=1e-6)
    np.testing.assert_allclose(shown_row(page), per_head[[4, 7, 9]].mean(0)[2], atol=1e-6)
    assert parse_qs(urlparse(page.url).query)["heads"] == ["4,7,9"]
    page.reload()
    wait_until(page, "document.querySelector('#heatmap .hm-title')?.textContent.includes('heads 4, 7, 9 averaged')")
    page.select_option("#head", "5")
    wait_until(page, "document.getElementById('head-set').hidden")


def heatmap(page):
    n, values = page.evaluate("(h => [h.n, Array.from(h.matrix)])(document.getElementById('heatmap').heatmap)")
    return np.array(values).reshape(n, n)


def test_a_layer_averaged_view(page, server, api):
    open_lab(page, server, "?layer=0&head=5&token=3")
    wait_view(page, "heatmap", 0, 5, 3)
    run = run_id(page)
    page.check("#block-mean")
    wait_until(
        page, "document.querySelector('#heatmap .hm-title').textContent.includes('all 6 blocks averaged, head 5')"
    )
    per_block = np.array([api_head(api, run, layer, 5)["weights"] for layer in range(6)])
    np.testing.assert_allclose(heatmap(page), per_block.mean(0), atol=1e-6)
    wait_until(page, "document.querySelector('#attends .caption').textContent.includes('all 6 blocks averaged')")
    np.testing.assert_allclose(shown_row(page), per_block.mean(0)[3], atol=1e-6)
    assert parse_qs(urlparse(page.url).query)["blocks"] == ["mean"]
