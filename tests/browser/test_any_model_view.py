"""The page follows any model a user brings: a sentence-transformers EmbeddingGemma (its prompts beside the
prompt, its prompt tokens marked, its Dense and Normalize modules in the sentence-vector panel, what its scores
do besides q·k/√d in the worked example and the tour), and an OPT, a family without an adapter (attention
weights only: every view that needs an adapter says why instead), and a Llama run in bfloat16 (the bar and the
exports say so, and the numbers are transformers' own bfloat16 ones). Tiny random folders (tests/families.py)
served by `python -m app`."""

import csv
import io
import json

import httpx
import numpy as np
import pytest
import torch
from playwright.sync_api import expect
from transformers import AutoModel, AutoTokenizer

from tests.browser.conftest import open_panel, save, screenshot, wait_until
from tests.conftest import LabProcess, start_together
from tests.families import build

TEXT = "The cat sat on the mat."


# Each lab's model family and settings beside its model folder.
SERVED = {
    "embeddinggemma": ("embeddinggemma", {}),
    "opt": ("opt", {}),
    "bfloat16": ("llama", {"ATTENTION_LAB_DTYPE": "bfloat16"}),
}


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """The module's labs by name, (url, model folder), started together."""
    served = {}
    for name, (family, env) in SERVED.items():
        folder = build(family, tmp_path_factory.mktemp(name) / family)
        served[name] = (LabProcess(folder.parent, env={"ATTENTION_LAB_MODEL_PATH": str(folder), **env}), folder)
    start_together(*(lab for lab, _ in served.values()))
    yield {name: (lab.url, folder) for name, (lab, folder) in served.items()}
    for lab, _ in served.values():
        lab.stop()


@pytest.fixture(scope="module")
def gemma_lab(labs):
    return labs["embeddinggemma"][0]


@pytest.fixture(scope="module")
def opt_lab(labs):
    return labs["opt"][0]


@pytest.fixture(scope="module")
def bfloat16_lab(labs):
    return labs["bfloat16"][0]


@pytest.fixture(scope="module")
def bfloat16_folder(labs):
    return labs["bfloat16"][1]


@pytest.fixture
def page_of(browser):
    """A 1280×720 page whose errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    yield page
    context.close()
    assert errors == []


def test_a_models_prompt_is_a_choice_its_tokens_are_marked_and_its_modules_shown(page_of, gemma_lab):
    page = page_of
    model = httpx.get(f"{gemma_lab}/api/model").json()
    page.goto(f"{gemma_lab}/?text=The+cat+sat+on+the+mat.&token=2&panel=pooled")
    wait_until(page, "document.querySelectorAll('#tokens .token').length > 0")
    options = page.locator("#prompt-name option").evaluate_all("options => options.map(o => o.value)")
    assert options == ["", *model["prompts"]] and page.locator("#prompt-name").input_value() == ""
    assert page.locator('#tokens .token[data-prompt="true"]').count() == 0
    if not page.locator("#prompt-name").is_visible():
        page.click("#options-toggle")
    page.select_option("#prompt-name", "query")
    page.wait_for_url("**prompt=query**")
    wait_until(page, "document.querySelectorAll('#tokens .token[data-prompt=\"true\"]').length > 0")
    body = httpx.post(f"{gemma_lab}/api/analyze", json={"text": TEXT, "prompt": "query"}).json()
    marked = page.locator('#tokens .token[data-prompt="true"] .token-text').all_inner_texts()
    assert marked == [token["label"] for token in body["tokens"] if token["prompt"]]
    assert (
        "".join(token["text"] for token in body["tokens"] if token["prompt"]).strip()
        == model["prompts"]["query"].strip()
    )
    # The text begins after the prompt's chips.
    after = page.locator("#prompt-boundary + .token").get_attribute("data-index")
    assert int(after) == len([token for token in body["tokens"] if token["prompt"]]) + 1  # <bos> first
    page.keyboard.press("Escape")
    open_panel(page, "pooled")
    stages = page.locator("#pooled [data-field=stages] li")
    expect(stages).to_have_count(4)
    shown = stages.evaluate_all(
        "items => items.map(i => [i.dataset.module, Number(i.dataset.size), Number(i.dataset.norm)])"
    )
    expected = [[stage["module"], len(stage["vector"]), stage["norm"]] for stage in body["pooled"]["stages"]]
    assert (
        [row[:2] for row in shown]
        == [row[:2] for row in expected]
        == [
            ["Pooling", 64],
            ["Dense", 96],
            ["Dense", 48],
            ["Normalize", 48],
        ]
    )
    assert [row[2] for row in shown] == pytest.approx([row[2] for row in expected], rel=1e-6)
    expect(stages.nth(2)).to_contain_text("Dense 96 → 48, then Tanh → 1×48")
    page.wait_for_selector("#pooled .pooled-chart .main-svg")
    screenshot(page, "73-embeddinggemma-prompt-and-modules")
    # The pooling lesson compares the model's own prompt: the cosine of the two sentence vectors.
    open_panel(page, "lessons")
    page.click("#lesson-tab-pooling")
    page.select_option("#pooling-prompt", "query")
    page.click("#lessons form.lesson-form button[type=submit]")
    compared = httpx.post(f"{gemma_lab}/api/pooling", json={"text": TEXT, "prompt": "query"}).json()["prefix"]
    prefix = "document.querySelector('#pooling-result [data-field=prefix]')?.textContent"
    wait_until(page, f"{prefix}?.includes('task: search result | query: The cat')")
    shown = float(page.locator("#pooling-result [data-field=prefix]").get_attribute("data-value"))
    assert shown == pytest.approx(compared["cosine"], abs=1e-6)
    page.reload()  # the link keeps the prompt
    wait_until(page, "document.querySelectorAll('#tokens .token[data-prompt=\"true\"]').length > 0")
    assert page.locator("#prompt-name").input_value() == "query"


def test_the_worked_example_and_the_tour_say_what_the_scores_do(page_of, gemma_lab):
    """EmbeddingGemma's scores: q and k normalised and rotated, 1/√24, a local block seeing 2 tokens either side."""
    page = page_of
    notes = httpx.get(f"{gemma_lab}/api/model").json()["score_notes"]
    assert any("1/√24" in note for note in notes) and any("on either side" in note for note in notes)
    page.goto(f"{gemma_lab}/?text=The+cat+sat+on+the+mat.&layer=0&head=1&token=4&panel=dissection")
    listed = page.locator("#dissection [data-field=score-notes] li")
    expect(listed).to_have_count(len(notes))
    assert listed.all_inner_texts() == notes
    listed.first.scroll_into_view_if_needed()
    screenshot(page, "74-embeddinggemma-score-notes")
    page.click("#tour-start")
    for _ in range(6):
        page.click("#tour-next")
    expect(page.locator("#tour-text")).to_contain_text(f"In this model: {notes[0]}")
    for _ in range(8):  # the sentence vector's last step names the model's Dense layers
        page.click("#tour-next")
    expect(page.locator("#tour-title")).to_have_text("Normalise")
    expect(page.locator("#tour-text")).to_contain_text("First this model's Dense layers (64 → 96, 96 → 48)")
    expect(page.locator("#tour-shape")).to_have_text("1×64 → 1×48, length 1")
    page.click("#tour-close")
    # Predict-first offers token 4 only the keys block 0's window lets it see: 2 on either side.
    page.goto(f"{gemma_lab}/?text=The+cat+sat+on+the+mat.&layer=0&head=0&token=4&predict=1")
    page.locator("#predict-question").wait_for(state="visible")
    offered = page.locator(".predict-choice:not([disabled])").evaluate_all(
        "choices => choices.map(c => c.dataset.index)"
    )
    assert offered == ["2", "3", "4", "5", "6"]


def test_a_family_without_an_adapter_shows_its_weights_and_says_why_the_rest_is_not_there(page_of, opt_lab):
    page = page_of
    model = httpx.get(f"{opt_lab}/api/model").json()
    reason = "no adapter for the 'opt' family: attention weights only"
    assert model["attention_only"] == reason
    page.goto(f"{opt_lab}/?text=The+cat+sat+on+the+mat.&token=2&layer=1&head=3")
    wait_until(page, "document.querySelector('#heatmap')?.dataset.view?.includes(':1:3:')")
    expect(page.locator("#model-name .attention-only")).to_have_text("(attention weights only)")
    assert page.locator("#model-name .attention-only").get_attribute("title") == reason
    for measure in ("norm", "alti", "alti_rollout"):
        option = page.locator(f'#measure option[value="{measure}"]')
        assert option.get_attribute("disabled") is not None and option.get_attribute("title") == reason
    for panel in ("dissection", "pipeline"):
        tab = page.locator(f"#panel-tab-{panel}")
        assert "unavailable" in tab.get_attribute("class") and reason in tab.get_attribute("title")
        open_panel(page, panel)
        expect(page.locator(f"#{panel} [data-field=unavailable]")).to_have_text(
            f"Not available for {model['name']}: {reason}."
        )
    screenshot(page, "75-opt-attention-only-pipeline")
    open_panel(page, "lessons")
    page.click("#lesson-tab-ablation")
    expect(page.locator("#lesson-panel [data-field=unavailable]")).to_contain_text(reason)
    page.click("#lesson-tab-heads")  # a lesson of the weights alone works: each head's role, the rollout
    wait_until(page, "document.querySelectorAll('#lesson-panel .head-roles [data-layer]').length === 8")
    wait_until(page, "document.querySelector('#lesson-panel [data-field=rollout]')")
    open_panel(page, "grid")
    wait_until(page, "document.querySelectorAll('#grid canvas, #grid svg, #grid .grid-cell').length > 0")
    page.click("#tour-start")
    for _ in range(5):
        page.click("#tour-next")
    expect(page.locator("#tour-text")).to_have_text(f"This step's view is not available for {model['name']}: {reason}.")
    screenshot(page, "76-opt-attention-only-tour")
    assert page.locator("#error").is_hidden()


def test_a_bfloat16_model_says_so_in_the_bar_and_in_its_exports_whose_numbers_are_its_own(
    browser, bfloat16_lab, bfloat16_folder
):
    context = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = context.new_page()
    page.goto(f"{bfloat16_lab}/?text=The+cat+sat+on+the+mat.&layer=1&head=2")
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    expect(page.locator("#model-dtype")).to_have_text("bfloat16")
    assert "not those of a float32 pass" in page.locator("#model-name").get_attribute("title")
    expect(page.locator("#measure-meaning")).to_contain_text("The model's own bfloat16 numbers.")
    page.goto(f"{bfloat16_lab}/?text=The+cat+sat+on+the+mat.&layer=1&measure=alti")
    expect(page.locator("#measure-meaning")).to_contain_text("Computed in float32 from the model's bfloat16 numbers.")
    page.goto(f"{bfloat16_lab}/?text=The+cat+sat+on+the+mat.&layer=1&head=2")
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    with page.expect_download() as download:
        save(page, "export-json")
    exported = json.loads(open(download.value.path()).read())
    with page.expect_download() as download:
        save(page, "export-csv")
    rows = list(csv.reader(io.StringIO(open(download.value.path()).read())))
    screenshot(page, "any-model-bfloat16-bar", page.locator(".topbar"))
    context.close()

    # transformers' own eager pass in bfloat16: its weights, upcast exactly, are the export's to the bit
    model = AutoModel.from_pretrained(bfloat16_folder, dtype=torch.bfloat16, attn_implementation="eager")
    ids = AutoTokenizer.from_pretrained(bfloat16_folder)("The cat sat on the mat.", return_tensors="pt")
    with torch.inference_mode():
        expected = model(**ids, output_attentions=True).attentions[1][0, 2].float().numpy()
    assert exported["dtype"] == "bfloat16"
    # bit for bit: same shapes (the served lone pass and transformers' own, both in bfloat16)
    np.testing.assert_array_equal(np.array(exported["matrix"], dtype=np.float32), expected)
    assert rows[1][0].startswith("# model: llama (bfloat16);"), rows[1]
    rows = [row for row in rows if not row[0].startswith("#")]
    # bit for bit: same shapes (as above, through the CSV)
    np.testing.assert_array_equal(np.array([row[1:] for row in rows[1:]], dtype=np.float32), expected)
