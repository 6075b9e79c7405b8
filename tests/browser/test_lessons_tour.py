"""The guided tour and predict-first mode: the tour's shapes are the current run's, and predict-first
grades a guess against the argmax of the API's exact softmax row."""

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS, screenshot, wait_until
from tests.browser.test_page import open_lab, run_id, wait_view

pytestmark = pytest.mark.slow

# step → (the element it outlines, what its shape line says for a run of n tokens)
STEPS = {
    1: ("tokens", lambda n: f"N = {n} tokens"),
    2: ("tokens", lambda n: f"{n} ids"),
    3: ("pipeline", lambda n: f"30,522×384 table → {n}×384"),
    4: ("pipeline", lambda n: f"{n}×384 + {n}×384 → {n}×384"),
    5: ("pipeline", lambda n: f"{n}×384"),
    6: ("dissection", lambda n: f"Q, K, V: {n}×384 each = 12 heads × {n}×32"),
    7: ("dissection", lambda n: f"{n}×32 · 32×{n} → 12 heads × {n}×{n}"),
    8: ("heatmap", lambda n: f"12 heads × {n}×{n}, every row sums to 1"),
    9: ("dissection", lambda n: f"{n}×{n} · {n}×32 → {n}×32 per head"),
    10: ("dissection", lambda n: f"12 × {n}×32 → {n}×384 · W_O 384×384 → {n}×384"),
    11: ("pipeline", lambda n: f"{n}×384 + {n}×384 → {n}×384"),
    12: ("pipeline", lambda n: f"{n}×384 → {n}×1536 (GELU) → {n}×384"),
    13: ("grid", lambda n: f"6 blocks × 12 heads × {n}×{n}; {n}×384 in and out of each block"),
    14: ("pooled", lambda n: f"{n}×384 → 1×384"),
    15: ("pooled", lambda n: "1×384 → 1×384, length 1"),
    16: ("lessons", lambda n: f"4 rankings of {n} keys, and how well they agree"),
}


def viewport_shot(page, name: str):
    """What the class sees: the tour box is fixed to the window, so a full-page picture misplaces it."""
    page.wait_for_timeout(600)  # the smooth scroll settles
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def tour_step(page) -> int | None:
    step = parse_qs(urlparse(page.url).query).get("tour")
    return int(step[0]) if step else None


def focused(page) -> list[str]:
    """The views the tour outlines (a view in a panel is outlined by the panel's visible area)."""
    return page.locator(".tour-focus").evaluate_all("nodes => nodes.map(n => n.dataset.tourTarget)")


def expect_step(page, step: int, n: int):
    target, shape = STEPS[step]
    expect(page.locator("#tour-counter")).to_have_text(f"Step {step} of 16")
    expect(page.locator("#tour-shape")).to_have_text(shape(n))
    assert focused(page) == [target]
    assert tour_step(page) == step


def in_sight(element_id: str) -> str:
    """A JS condition: some of the element is inside the window."""
    box = f"document.getElementById('{element_id}').getBoundingClientRect()"
    return f"(b => b.top < innerHeight && b.bottom > 0)({box})"


def test_the_tour_walks_every_step_with_the_runs_shapes(page, server):
    open_lab(page, server)
    page.fill("#prompt", "the river bank flooded")
    page.press("#prompt", "Enter")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 6")
    run_id(page)
    n = 6
    page.click("#tour-start")
    dialog = page.locator("#tour")
    expect(dialog).to_be_visible()
    assert page.evaluate("document.activeElement.id") == "tour"
    assert dialog.get_attribute("role") == "dialog"
    assert page.locator("#tour-start").get_attribute("aria-expanded") == "true"
    expect_step(page, 1, n)
    expect(page.locator("#tour-text")).to_contain_text("6 pieces")
    for step in range(2, 17):
        page.click("#tour-next")
        expect_step(page, step, n)
        wait_until(page, in_sight(STEPS[step][0]))
        if step == 3:
            viewport_shot(page, "20-tour-step-3")
        if step == 15:
            expect(page.locator("#tour-text")).to_contain_text(page.locator('#pooled [data-field="norm"]').inner_text())
    expect(page.locator("#lesson-tab-explain")).to_have_attribute("aria-selected", "true")  # the last step's lesson
    expect(page.locator("#tour-next")).to_have_text("Finish")
    page.click("#tour-back")
    expect_step(page, 15, n)
    page.click("#tour-next")
    page.click("#tour-next")  # Finish closes the tour
    expect(dialog).to_be_hidden()
    assert focused(page) == [] and tour_step(page) is None


def test_tour_keys_and_escape(page, server):
    open_lab(page, server, "?token=3")
    wait_view(page, "heatmap", 0, 0, 3)
    n = page.locator("#tokens .token").count()
    page.locator("#tour-start").focus()
    page.keyboard.press("Enter")
    expect_step(page, 1, n)
    expect(page.locator("#tour-back")).to_be_disabled()
    page.keyboard.press("ArrowLeft")  # no step before the first
    expect_step(page, 1, n)
    for step in (2, 3, 4, 5, 6, 7):
        page.keyboard.press("ArrowRight")
        expect_step(page, step, n)
    page.keyboard.press("ArrowLeft")
    expect_step(page, 6, n)
    expect(page.locator("#tour-text")).to_contain_text(f"{n}×32 per head")
    # The arrows moved the tour, not the selected token.
    assert page.locator('#tokens .token[aria-selected="true"]').get_attribute("data-index") == "3"
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect_step(page, 8, n)
    wait_until(page, in_sight("heatmap"))
    viewport_shot(page, "21-tour-step-8")
    page.keyboard.press("Escape")
    expect(page.locator("#tour")).to_be_hidden()
    assert page.evaluate("document.activeElement.id") == "tour-start"
    assert focused(page) == [] and tour_step(page) is None
    assert page.locator('#tokens .token[aria-selected="true"]').get_attribute("data-index") == "3"


def test_a_tour_link_opens_at_its_step(page, server):
    open_lab(page, server, "?tour=5")
    n = page.locator("#tokens .token").count()
    expect_step(page, 5, n)
    assert page.evaluate("document.activeElement.id") == "tour"
    page.locator("#tour-next").click()
    expect_step(page, 6, n)
    page.reload()
    run_id(page)
    expect_step(page, 6, n)
    wait_until(page, in_sight("dissection"))
    page.goto(f"{server}/?tour=99")  # no such step: no tour
    run_id(page)
    expect(page.locator("#tour")).to_be_hidden()


def overlap(a, b) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_the_tour_in_presentation_mode(page, server):
    open_lab(page, server, "?present=1&tour=7&token=2&layer=1&head=3")
    wait_view(page, "dissection", 1, 3, 2)  # the step about scores opened the worked example
    expect(page.locator("#tour")).to_be_visible()
    assert page.locator("#panel-tab-dissection").get_attribute("aria-selected") == "true"
    page.wait_for_timeout(300)  # the box follows the views as they fill in
    box = page.locator("#tour").bounding_box()
    assert box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= 1280 and box["y"] + box["height"] <= 720
    assert not overlap(box, page.locator("#heatmap .hm-canvas").bounding_box())
    assert not overlap(box, page.locator('[data-tour-target="dissection"]').bounding_box())  # the panel's visible area
    viewport_shot(page, "22-tour-presentation")


def query_weights(api, run, layer, head, token) -> np.ndarray:
    return np.array(api.get(f"/api/runs/{run}/layers/{layer}/heads/{head}/queries/{token}").json()["weights"])


def test_predict_first_hides_the_views_and_keeps_score(page, server, api):
    open_lab(page, server, "?layer=2&head=5&panel=dissection")
    page.check("#predict")
    assert parse_qs(urlparse(page.url).query)["predict"] == ["1"]
    page.locator('#tokens .token[data-index="10"]').click()  # "it"
    question = page.locator("#predict-question")
    expect(question).to_be_visible()
    expect(question.locator("h3")).to_have_text("Which token will “it” attend to most in block 2, head 5?")
    for view in ("heatmap", "attends", "dissection"):
        expect(page.locator(f"#{view}")).to_be_hidden()
    expect(page.locator("#dissection-cover")).to_be_visible()
    screenshot(page, "23-predict-question", page.locator("#views"))

    run = run_id(page)
    weights = query_weights(api, run, 2, 5, 10)
    best = int(np.argmax(weights))
    question.locator(f'.predict-choice[data-index="{best}"]').click()
    result = page.locator("#predict-result")
    expect(result).to_contain_text("Right")
    expect(result).to_contain_text(f"weight {weights[best]:.4f}")
    expect(page.locator("#predict-score")).to_have_text("1 of 1 right")
    expect(question).to_be_hidden()
    wait_view(page, "heatmap", 2, 5, 10)
    wait_view(page, "attends", 2, 5, 10)
    wait_view(page, "dissection", 2, 5, 10)
    screenshot(page, "24-predict-right", page.locator("#views"))

    page.locator('#tokens .token[data-index="3"]').click()
    expect(question).to_be_visible()
    expect(page.locator("#heatmap")).to_be_hidden()
    weights = query_weights(api, run, 2, 5, 3)
    best = int(np.argmax(weights))
    wrong = int(np.argmin(weights))
    question.locator(f'.predict-choice[data-index="{wrong}"]').click()
    expect(result).to_contain_text("Not this time")
    expect(result.locator('[data-field="best-weight"]')).to_have_text(f"{weights[best]:.4f}")
    assert result.locator('[data-field="best-weight"]').get_attribute("data-index") == str(best)
    expect(page.locator("#predict-score")).to_have_text("1 of 2 right")
    screenshot(page, "25-predict-wrong", page.locator("#views"))

    page.locator('#tokens .token[data-index="10"]').click()  # answered already: not asked again
    expect(question).to_be_hidden()
    expect(result).to_contain_text("Right")

    page.select_option("#head", "mean")  # a new head: a new question, graded on the mean of all rows
    expect(question.locator("h3")).to_contain_text("block 2, all 12 heads averaged")
    mean = np.mean([query_weights(api, run, 2, h, 10) for h in range(12)], axis=0)
    question.locator(f'.predict-choice[data-index="{int(np.argmax(mean))}"]').click()
    expect(result).to_contain_text(f"weight {mean.max():.4f}")
    expect(page.locator("#predict-score")).to_have_text("2 of 3 right")

    page.uncheck("#predict")
    expect(page.locator("#predict-score")).to_be_hidden()
    assert "predict" not in parse_qs(urlparse(page.url).query)


def test_predict_first_under_a_causal_mask_offers_only_visible_tokens(page, server, api):
    open_lab(page, server, "?predict=1&mask=causal&token=4&layer=0&head=1")
    question = page.locator("#predict-question")
    expect(question).to_be_visible()
    assert page.locator("#predict").is_checked()
    choices = question.locator(".predict-choice")
    enabled = [choice.is_enabled() for choice in choices.all()]
    assert enabled == [index <= 4 for index in range(choices.count())]
    weights = query_weights(api, run_id(page), 0, 1, 4)
    best = int(np.argmax(weights))
    assert best <= 4
    question.locator(f'.predict-choice[data-index="{best}"]').focus()  # answers are buttons: keyboard-reachable
    page.keyboard.press("Enter")
    expect(page.locator("#predict-result")).to_contain_text("Right")
    assert page.evaluate("document.activeElement.id") == "predict-result"


TOUR_HINTS = {
    "keys": "← → move between steps, Esc closes.",
    "touch": "Tap Next or Back to move between steps, Close to close.",
}


@pytest.mark.parametrize("screen", ["keys", "touch"])
def test_the_tours_hint_names_the_controls_of_the_screen_it_is_on(browser, server, screen):
    """A desktop's tour says its keys; a phone's (a touch screen, no mouse) says its taps, and each does what
    it says."""
    if screen == "touch":
        options = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
    else:
        options = {"viewport": {"width": 1280, "height": 720}}
    context = browser.new_context(**options)
    try:
        page = context.new_page()
        open_lab(page, server)
        n = page.locator("#tokens .token").count()
        press = page.tap if screen == "touch" else page.click
        press("#tour-start")
        expect_step(page, 1, n)
        hint = page.locator("#tour .hint:visible")
        expect(hint).to_have_count(1)
        expect(hint).to_have_text(TOUR_HINTS[screen])
        viewport_shot(page, f"tour-hint-{screen}")
        if screen == "touch":
            page.tap("#tour-next")
            expect_step(page, 2, n)
            page.tap("#tour-back")
            expect_step(page, 1, n)
            page.tap("#tour-close")
        else:
            page.keyboard.press("ArrowRight")
            expect_step(page, 2, n)
            page.keyboard.press("Escape")
        expect(page.locator("#tour")).to_be_hidden()
    finally:
        context.close()
