"""The page adapts to the model it serves: a Llama-style decoder (Mistral: RoPE, RMSNorm, SwiGLU, grouped K/V
heads, a sliding window, an LM head) and a RoBERTa encoder, tiny random models built in a temp folder and
served by `python -m app`."""

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import open_panel, screenshot, wait_until
from tests.conftest import LabProcess, start_together
from tests.families import build


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """A Mistral's lab and a RoBERTa's, by family, started together."""
    served = {}
    for name in ("mistral", "roberta"):
        folder = build(name, tmp_path_factory.mktemp(name) / "model")
        served[name] = LabProcess(folder.parent, env={"ATTENTION_LAB_MODEL_PATH": str(folder)})
    start_together(*served.values())
    yield {name: lab.url for name, lab in served.items()}
    for lab in served.values():
        lab.stop()


@pytest.fixture(scope="module")
def mistral_lab(labs):
    return "mistral", labs["mistral"]


@pytest.fixture(scope="module")
def roberta_lab(labs):
    return "roberta", labs["roberta"]


@pytest.fixture(scope="module", params=["mistral", "roberta"])
def family_lab(request):
    return request.getfixturevalue(f"{request.param}_lab")


@pytest.fixture
def family_page(browser, family_lab):
    name, url = family_lab
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.goto(f"{url}/?text=The+cat+sat+on+the+mat.&token=2&panel=pipeline")
    wait_until(page, "document.querySelector('#pipeline .stage-row')")
    yield name, url, page
    context.close()
    assert errors == []


def test_the_page_follows_the_models_family(family_page):
    name, url, page = family_page
    model = httpx.get(f"{url}/api/model").json()
    expect(page.locator("#model-name")).to_contain_text(model["family"])
    masks = page.locator("#mask option").all_inner_texts()
    poolings = page.locator("#pooling option").evaluate_all("options => options.map(o => o.value)")
    assert masks == model["masks"] and poolings == model["poolings"]
    assert page.locator("#pooling").input_value() == model["default_pooling"]
    assert page.locator("#mask").input_value() == model["default_mask"]
    open_panel(page, "pipeline")
    pipeline = page.locator("#pipeline")
    if name == "mistral":
        assert masks == ["causal"] and model["default_pooling"] == "last"
        expect(pipeline).to_contain_text("RoPE")
        expect(pipeline).to_contain_text("SiLU(x · W_gate)")
        wait_until(page, "document.querySelectorAll('#pipeline .next-tokens li').length === 5")
        candidates = httpx.get(f"{url}/api/runs/{run_id(url)}/tokens/2/next").json()
        shown = page.locator("#pipeline .next-tokens code").all_inner_texts()
        assert shown == [candidate["token"] for candidate in candidates["candidates"]]
        # No position table and no token types: only the word row is an embedding stage here.
        assert page.locator("#pipeline .row").evaluate_all("rows => rows.map(r => r.dataset.field)") == ["word"]
    else:
        assert masks == ["bidirectional", "causal"]
        expect(pipeline).to_contain_text("LN(x + attention)")
        fields = page.locator("#pipeline .row").evaluate_all("rows => rows.map(r => r.dataset.field)")
        assert fields == ["word", "position", "token_type", "sum", "normalized"]
        assert page.locator("#pipeline .next-tokens").count() == 0
    screenshot(page, f"70-family-{name}-pipeline")


def run_id(url) -> str:
    """The page's run: the same spec names the same run, so analyzing the text again gives its id."""
    return httpx.post(f"{url}/api/analyze", json={"text": "The cat sat on the mat."}).json()["run_id"]


def test_the_tour_says_how_this_model_knows_positions(family_page):
    name, url, page = family_page
    page.click("#tour-start")
    for _ in range(3):
        page.click("#tour-next")
    text, title = page.locator("#tour-text").inner_text(), page.locator("#tour-title").inner_text()
    if name == "mistral":
        assert "rotates each query and key" in text and "RoPE" in title
    else:
        assert "a second table adds a vector for each position" in text
    page.click("#tour-close")


def test_a_sliding_window_is_named_and_its_hidden_keys_are_not_offered(browser, mistral_lab):
    """Every block of the Mistral slides a window of 3 tokens (tests/families.py): the heatmap's title says so,
    predict-first offers token 5 only the keys its window lets it see, 3 to 5, and the masks lesson says why."""
    _, url = mistral_lab
    assert httpx.get(f"{url}/api/model").json()["windows"] == [3, 3]
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.goto(f"{url}/?text=The+cat+sat+on+the+mat.&layer=1&head=0&token=5&predict=1")
    page.locator("#predict-question").wait_for(state="visible")
    choices = page.locator(".predict-choice:not([disabled])")
    offered = choices.evaluate_all("choices => choices.map(c => c.dataset.index)")
    assert offered == ["3", "4", "5"]
    page.locator('.predict-choice[data-index="4"]').click()
    wait_until(page, "document.querySelector('#heatmap .hm-title')?.textContent.includes('sliding window of 3 tokens')")
    assert page.locator("#heatmap .hm-title").inner_text().endswith("· causal mask, sliding window of 3 tokens")
    screenshot(page, "70-family-mistral-window")
    page.goto(f"{url}/?text=The+cat+sat+on+the+mat.&token=5&panel=lessons&lesson=masks")
    expect(page.locator("#masks-decoder")).to_contain_text(
        "Its blocks also slide a window (block 0: 3, block 1: 3): there row i is zero before column i − window + 1"
    )
    context.close()


@pytest.fixture(scope="module")
def two_model_lab(tmp_path_factory):
    """The packaged MiniLM by default, and a tiny GPT-2 in the picker (its scores scaled by 1/√d_head and by
    the block's number: tests/families.py)."""
    folder = build("gpt2", tmp_path_factory.mktemp("picker") / "tiny-gpt2")
    lab = LabProcess(folder.parent, env={"ATTENTION_LAB_MODELS": str(folder)})
    lab.start()
    yield lab.url
    lab.stop()


def test_the_model_picker_opens_the_other_model_with_the_prompt(browser, two_model_lab):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.goto(f"{two_model_lab}/?text=The+cat+sat.")
    wait_until(page, "document.querySelectorAll('#tokens .token').length > 0")
    assert page.locator("#model-picker option").all_inner_texts() == [
        "sentence-transformers/all-MiniLM-L6-v2",
        "tiny-gpt2",
    ]
    page.select_option("#model-picker", "tiny-gpt2")
    page.wait_for_url("**model=tiny-gpt2**")
    wait_until(page, "document.querySelectorAll('#tokens .token').length > 0")
    expect(page.locator("#model-name")).to_contain_text("GPT-2")
    assert page.locator("#prompt").input_value() == "The cat sat."
    assert page.locator("#mask option").all_inner_texts() == ["causal"]
    assert "model=tiny-gpt2" in page.url  # a link to this view opens this model
    page.reload()
    expect(page.locator("#model-name")).to_contain_text("GPT-2")
    screenshot(page, "71-model-picker-gpt2")
    context.close()


def test_the_worked_example_scales_by_the_blocks_own_factor(browser, two_model_lab):
    """Block 1 of the tiny GPT-2 scales q·k by 1/(√16 · 2): the worked example says so, and q·k times that
    factor is the score the server computed."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.goto(f"{two_model_lab}/?model=tiny-gpt2&text=The+cat+sat+on+the+mat.&layer=1&head=2&token=4&panel=dissection")
    score = page.locator("#dissection [data-field=score]")
    score.wait_for()
    step = score.locator("xpath=ancestor::div[contains(@class, 'step')]")
    expect(step).to_contain_text("Dot product, then this block's scale")
    expect(step).to_contain_text("score = q·k × 0.12500")
    dot = float(page.locator("#dissection [data-field=dot]").get_attribute("data-value"))
    run = httpx.post(f"{two_model_lab}/api/analyze", json={"text": "The cat sat on the mat.", "model": "tiny-gpt2"})
    numbers = httpx.get(f"{two_model_lab}/api/runs/{run.json()['run_id']}/layers/1/heads/2/queries/4").json()
    top = max(range(len(numbers["weights"])), key=numbers["weights"].__getitem__)
    assert float(score.get_attribute("data-value")) == pytest.approx(numbers["scores"][top], abs=1e-6)
    assert dot * 0.125 == pytest.approx(numbers["scores"][top], abs=1e-5)
    step.scroll_into_view_if_needed()
    screenshot(page, "71-gpt2-worked-example")
    context.close()


def test_the_explain_lesson_attributes_what_the_model_outputs(browser, family_lab):
    """A decoder ranks the keys by attribution of its next token's logit; an encoder by its similarity."""
    name, url = family_lab
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.goto(f"{url}/?text=The+cat+sat+on+the+mat.&layer=1&head=1&token=4&panel=lessons&lesson=explain")
    wait_until(page, "document.querySelector('#explain-result [data-field=correlations]')", timeout=60)
    if name == "mistral":
        expect(page.locator("#lessons")).to_contain_text("the token the model would write next")
        target = {"target": "next_token"}
    else:
        expect(page.locator("#lessons")).to_contain_text("similarity to a second sentence")
        target = {"other": page.locator("#explain-other").input_value()}
    body = httpx.post(f"{url}/api/attribution", json={"text": "The cat sat on the mat.", **target}).json()
    cells = page.locator("#explain-result td[data-measure=attribution]").evaluate_all(
        "cells => cells.map(c => [Number(c.closest('tr').dataset.key), Number(c.dataset.value)])"
    )
    assert cells and all(value == pytest.approx(abs(body["attributions"][key]), abs=1e-6) for key, value in cells)
    screenshot(page, f"72-explain-{name}")
    context.close()
