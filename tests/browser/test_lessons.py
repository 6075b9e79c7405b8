"""The experiments panel in chromium: every number shown equals the lesson endpoints' numbers."""

import json

import numpy as np
import pytest

from tests.browser.conftest import screenshot, wait_until

pytestmark = pytest.mark.slow


def open_lesson(page, server, name, query="?token=3"):
    page.goto(f"{server}/{query}&panel=lessons")
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    page.locator(f"#lesson-tab-{name}").click()
    run = page.evaluate("() => document.body.dataset.run")
    wait_until(page, f"document.getElementById('lesson-panel').dataset.view?.startsWith('{name}:{run}')")
    page.locator("#lessons").scroll_into_view_if_needed()
    return run


def cells(page, selector, attribute="data-value"):
    return [float(node.get_attribute(attribute)) for node in page.locator(selector).all()]


def test_same_id_different_meaning(page, server, api):
    open_lesson(page, server, "compare")
    page.locator("#compare-run").click()
    wait_until(page, "document.querySelectorAll('#compare-result [data-field=cosines] tr[data-stage]').length === 8")
    a = api.post("/api/analyze", json={"text": "the river bank"}).json()
    b = api.post("/api/analyze", json={"text": "the bank approved the loan"}).json()
    expected = api.get("/api/compare", params={"a": a["run_id"], "b": b["run_id"], "token_a": 3, "token_b": 2}).json()
    assert page.locator("#compare-token option:checked").inner_text().startswith("“bank” (id 2924)")
    np.testing.assert_allclose(cells(page, "#compare-result [data-field=cosines] tr[data-stage]"), expected["cosines"])
    wait_until(page, "document.querySelectorAll('#compare-result .lesson-map .hm-canvas').length === 2")
    screenshot(page, "lesson-compare", page.locator("#lessons"))


def test_bidirectional_against_causal(page, server, api):
    run = open_lesson(page, server, "masks", "?token=10")
    page.locator("#masks-run").click()
    wait_until(page, "document.querySelector('#masks-result [data-field=pooled-cosine]')")
    text = page.locator("#prompt").input_value()
    causal = api.post("/api/analyze", json={"text": text, "mask": "causal"}).json()
    expected = api.get("/api/compare", params={"a": run, "b": causal["run_id"], "token_a": 10, "token_b": 10}).json()
    np.testing.assert_allclose(cells(page, "#masks-result [data-field=cosines] tr[data-stage]"), expected["cosines"])
    assert float(page.locator("#masks-result [data-field=pooled-cosine]").get_attribute("data-value")) == pytest.approx(
        expected["pooled_cosine"]
    )
    screenshot(page, "lesson-masks", page.locator("#lessons"))


def test_switching_heads_off(page, server, api):
    run = open_lesson(page, server, "ablation", "?token=2")
    for head in (0, 1):
        page.locator(f'.ablation-toggle[data-layer="4"][data-head="{head}"]').click()
    page.locator("#ablation-run").click()
    wait_until(page, "document.querySelector('#ablation-result [data-field=pooled-cosine]')")
    text = page.locator("#prompt").input_value()
    ablated = api.post("/api/analyze", json={"text": text, "ablate": [[4, 0], [4, 1]]}).json()
    expected = api.get("/api/compare", params={"a": run, "b": ablated["run_id"], "token_a": 2, "token_b": 2}).json()
    shown = float(page.locator("#ablation-result [data-field=pooled-cosine]").get_attribute("data-value"))
    assert shown == pytest.approx(expected["pooled_cosine"])
    change = page.evaluate("() => JSON.parse(document.getElementById('ablation-result').dataset.attentionChange)")
    assert change == expected["attention_change"] and change[:5] == [0.0] * 5
    # The first switched-off head still shows what it computes (weights · V) and that W_O got zeros.
    off = page.locator("#ablation-result [data-field=ablated-head]")
    served = api.get(f"/api/runs/{ablated['run_id']}/layers/4/heads/0/queries/2").json()
    context = np.array(json.loads(off.get_attribute("data-context")))
    np.testing.assert_allclose(context, np.array(served["weights"]) @ np.array(served["v"]), atol=1e-5)
    assert np.abs(context).max() > 0 and not any(json.loads(off.get_attribute("data-to-output")))
    screenshot(page, "lesson-ablation", page.locator("#lessons"))


def test_what_each_head_does(page, server, api):
    run = open_lesson(page, server, "heads", "?token=5")
    wait_until(page, "document.querySelectorAll('#lesson-panel .head-role').length === 72")
    stats = api.get(f"/api/runs/{run}/head-stats").json()["heads"]
    labels = [node.get_attribute("data-label") for node in page.locator("#lesson-panel .head-role").all()]
    assert labels == [stat["label"] or "" for stat in stats]
    rollout = api.get(f"/api/runs/{run}/tokens/5/rollout").json()["rollout"]
    np.testing.assert_allclose(cells(page, "#lesson-panel [data-field=rollout] li"), rollout)
    # Every square has room for its words: none spills into its neighbour (the grid scrolls instead).
    spilling = page.evaluate(
        "() => [...document.querySelectorAll('#lesson-panel .head-role')].filter((cell) =>"
        " [...cell.children].some((part) => part.scrollWidth > cell.clientWidth)).length"
    )
    assert spilling == 0
    screenshot(page, "lesson-heads", page.locator("#lessons"))
    page.locator('#lesson-panel .head-role[data-layer="2"][data-head="7"]').click()
    assert page.locator("#layer").input_value() == "2" and page.locator("#head").input_value() == "7"


def test_nearest_vocabulary_rows(page, server, api):
    run = open_lesson(page, server, "nearest", "?token=4")
    wait_until(page, "document.querySelectorAll('#lesson-panel [data-field=nearest] tbody tr').length === 7")
    expected = api.get(f"/api/runs/{run}/tokens/4/nearest", params={"k": 5}).json()["stages"]
    for row, stage in zip(page.locator("#lesson-panel [data-field=nearest] tbody tr").all(), expected, strict=True):
        assert row.get_attribute("data-stage") == stage["stage"]
        assert [int(cell.get_attribute("data-id")) for cell in row.locator("td").all()] == [
            r["id"] for r in stage["rows"]
        ]
    assert "not what the model predicts" in page.locator("#lesson-panel").inner_text()
    screenshot(page, "lesson-nearest", page.locator("#lessons"))


def test_pooling_and_prefixes(page, server, api):
    open_lesson(page, server, "pooling")
    wait_until(page, "document.querySelector('#pooling-result [data-field=prefix]')")
    text = page.locator("#prompt").input_value()
    expected = api.post("/api/pooling", json={"text": text, "prefix": "query: "}).json()
    norms = {
        row.get_attribute("data-strategy"): float(row.get_attribute("data-norm"))
        for row in page.locator("#pooling-result [data-field=strategies] tr[data-strategy]").all()
    }
    assert norms == pytest.approx({name: value["norm"] for name, value in expected["strategies"].items()})
    shown = float(page.locator("#pooling-result [data-field=prefix]").get_attribute("data-value"))
    assert shown == pytest.approx(expected["prefix"]["cosine"])
    assert "null" not in page.locator("#pooling-result").inner_text()  # a short prompt: no whole-input line
    screenshot(page, "lesson-pooling", page.locator("#lessons"))
