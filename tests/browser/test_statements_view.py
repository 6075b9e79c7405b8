"""The page says exactly what its numbers are: the sink holds the tokens the tokenizer added and no
others, and the sentence vector says how many tokens it was pooled over."""

import numpy as np
import pytest

from tests.browser.conftest import open_panel, screenshot, wait_until
from tests.browser.test_page import heatmap_z, run_id, wait_view

pytestmark = pytest.mark.slow


def test_an_emoji_read_as_unk_is_not_hidden_with_the_sinks(page, server, api):
    page.goto(f"{server}/?text=I%20love%20%F0%9F%99%82%20so%20much&layer=3&head=0&token=2&sinks=hide")
    wait_view(page, "attends", 3, 0, 2)
    body = api.post("/api/analyze", json={"text": "I love 🙂 so much"}).json()
    assert [token["text"] for token in body["tokens"]][3] == "[UNK]"
    weights = np.array(api.get(f"/api/runs/{run_id(page)}/layers/3/heads/0").json()["weights"])
    sink = float(page.locator('#attends [data-field="sink"] .attend-weight').get_attribute("data-value"))
    assert sink == pytest.approx(weights[2, [0, 6]].sum(), abs=1e-6)  # [CLS]+[SEP] only (0.1903)
    assert page.locator('#attends [data-field="sink"] .attend-token').inner_text() == "sink: [CLS]+[SEP]"
    shown = heatmap_z(page)
    assert not np.isnan(shown[:, 3]).any() and np.isnan(shown[:, [0, 6]]).all()  # [UNK] keeps its column
    assert "[CLS]+[SEP]" in page.locator(".hm-sink").get_attribute("title")
    open_panel(page, "grid")
    wait_until(page, "document.getElementById('grid-shares-names').textContent === '[CLS]+[SEP]'")
    screenshot(page, "statements-sinks", page.locator("#views"))


def test_a_long_text_says_its_sentence_vector_reads_the_first_256_tokens(page, server, api):
    text = " ".join(f"word{index % 37} river{index % 11}" for index in range(200))
    page.goto(server)
    run_id(page)
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    wait_until(
        page, "document.querySelectorAll('#tokens .token').length > 256 && document.body.dataset.busy === 'false'"
    )
    open_panel(page, "pooled")
    note = page.locator('#pooled [data-field="pooled-tokens"]')
    note.wait_for()
    assert note.get_attribute("data-value") == "256"
    assert "max_seq_length" in note.inner_text() and "of the" in note.inner_text()
    # The vector comes from its own pass, asked for when the panel opened: the numbers are the server's.
    served = api.get(f"/api/runs/{run_id(page)}/pooled").json()
    norm = float(page.locator('#pooled [data-field="norm"]').get_attribute("data-value"))
    assert served["tokens"] == 256 and norm == pytest.approx(served["norm"], rel=1e-6)
    screenshot(page, "statements-pooled-cut", page.locator("#pooled"))
