"""The page with an encoder-decoder (a tiny random Marian served beside a BERT): it does not draw the run's three
kinds of attention yet, and says so in a sentence where it would run the model, with no error in the page, at a
projector's size and a phone's."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot, wait_until
from tests.conftest import LabProcess
from tests.families import build


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    bert = build("bert", tmp_path_factory.mktemp("bert") / "bert")
    marian = build("marian", tmp_path_factory.mktemp("marian") / "marian")
    process = LabProcess(bert.parent, env={"ATTENTION_LAB_MODEL_PATH": str(bert), "ATTENTION_LAB_MODELS": str(marian)})
    process.start()
    yield process.url
    process.stop()


@pytest.mark.parametrize("size", [(1024, 768), (360, 740)], ids=["projector", "phone"])
def test_an_encoder_decoder_is_said_not_drawn(browser, lab, size):
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.goto(f"{lab}/?model=marian&text=The+cat+sat+on+the+mat.")
    wait_until(page, "!document.getElementById('error').hidden")
    expect(page.locator("#error")).to_contain_text("marian is an encoder-decoder (Marian)")
    expect(page.locator("#error")).to_contain_text("does not draw its source, target and cross-attention yet")
    page.fill("#prompt", "A quick brown fox.")
    page.locator("#prompt").press("Enter")
    expect(page.locator("#error")).to_contain_text("encoder-decoder")
    screenshot(page, f"encoder-decoder-said-{size[0]}")
    context.close()
    assert errors == []
