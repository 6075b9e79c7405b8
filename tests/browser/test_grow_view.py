"""Issue 56: a teacher grows a model from the page. A class votes first on which head will become the induction
head (its heads hidden from the page until the reveal); one click on Start grows the induction recipe; the panel
shows its progress, its loss curves with the phase change marked and its heads × steps picture; the checkpoint
slider opens a checkpoint on the stage, and on that page moving the slider reruns the prompt on another
checkpoint in place. Read at 1024×768 and on a 390 phone, checked by axe-core. On a lab of its own, so that
the grown models reach no other test's model picker."""

import time

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.browser import audit
from tests.browser.conftest import ARTIFACTS, wait_until
from tests.browser.test_classroom import choice_labels, end_class, revealed, start_class, vote_on
from tests.conftest import LabProcess

PANEL = "#panel-grow"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("grow-data")
    lab = LabProcess(tmp_path_factory.mktemp("grow-lab"), env={"ATTENTION_LAB_DATA_DIR": str(data)})
    lab.start()
    yield lab.url
    lab.stop()


def status_of(server: str, train_id: str) -> dict:
    return httpx.get(f"{server}/api/train/{train_id}", timeout=30).json()


def train_id_of(page) -> str:
    return page.evaluate("new URLSearchParams(location.search).get('train')")


def shot(page, name: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def serious(page) -> list[str]:
    violations = Axe().run(page, context=PANEL).response["violations"]
    return [f"{v['id']}: {v['help']}" for v in violations if v["impact"] in ("serious", "critical")]


def test_a_teacher_grows_the_recipe_watches_its_phase_change_and_opens_its_checkpoints(browser, server):
    errors = []
    context = browser.new_context(viewport={"width": 1024, "height": 768}, bypass_csp=True)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(f"console: {message.text}"))
    page.goto(f"{server}/?present=1")
    wait_until(page, "document.body.dataset.run")
    # a class: before the model grows, it votes on which head will become the induction head
    started = start_class(page)
    learner = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    learner.on("pageerror", lambda error: errors.append(f"learner: {error}"))
    learner.goto(started["join_url"])
    learner.click("#class-name-skip")
    page.click("#class-fold")  # the class panel folds to a strip: the stage's panels get the room
    if page.locator("#panel-menu").is_visible():  # a narrow side column lists the panels under one button
        page.click("#panel-menu")
    page.click("#panel-tab-grow")
    page.wait_for_selector("#grow-start:visible")
    page.click("#grow-ask")
    assert choice_labels(learner) == ["head 0.0", "head 0.1", "head 1.0", "head 1.1"]
    vote_on(learner, "head 1.1")
    page.click("#grow-start")
    wait_until(page, "new URLSearchParams(location.search).get('train')")
    train_id = train_id_of(page)
    assert status_of(server, train_id)["spec"]["layers"] == 2  # {}: the recipe

    # the phase change, drawn as it happens, the heads hidden while the class votes: then paused
    wait_until(page, "document.getElementById('grow-curves').textContent.includes('phase change, step')", timeout=120)
    deadline = time.monotonic() + 60
    while status_of(server, train_id)["phase_change"]["formed"] is None:
        assert time.monotonic() < deadline, "no induction head formed"
        page.wait_for_timeout(200)
    page.wait_for_timeout(1200)  # the page has read the status that says so
    assert page.locator("#grow-heads").is_hidden() and page.locator("#grow-heads-hidden").is_visible()
    assert "induction head" not in page.text_content("#grow-progress") + page.text_content("#grow-chosen")
    page.click("#grow-pause")
    wait_until(page, "document.getElementById('grow-progress').textContent.startsWith('Paused')")
    found = status_of(server, train_id)
    assert found["state"] == "paused" and found["phase_change"]["formed"] is not None
    page.click("#class-fold")
    page.click("#class-reveal")
    answer = revealed(server, started["code"])["answer"]
    layer, head = found["checkpoints"][-1]["scores"]["induction_head"]
    assert answer["label"] == f"head {layer}.{head}"
    assert answer["value"] == found["checkpoints"][-1]["scores"]["induction_score"]
    wait_until(learner, f"document.getElementById('class-question').textContent.includes('head {layer}.{head}')")
    learner.screenshot(path=ARTIFACTS / "grow-class-revealed-phone-390.png")
    end_class(server, started)
    learner.context.close()
    page.click("#class-fold")  # the ended class's panel folded away: the stage's panels get the room again
    wait_until(page, "document.getElementById('grow-progress').textContent.includes('induction head')")
    assert page.locator("#grow-heads").is_visible()
    phase = found["phase_change"]["step"]
    assert f"phase change, step {phase}" in page.text_content("#grow-curves")
    ticks = page.locator("#grow-heads .ytick text").all_text_contents()
    assert ticks == ["head 0.0", "head 0.1", "head 1.0", "head 1.1"]
    assert page.locator("#grow-resume").is_visible() and page.locator("#grow-pause").is_hidden()
    page.locator(PANEL).scroll_into_view_if_needed()
    page.click("#panel-enlarge")
    follows = "document.querySelector('#grow-curves .main-svg').getBoundingClientRect().width"
    wait_until(page, f"{follows} > 0.95 * document.getElementById('grow-curves').getBoundingClientRect().width")
    page.locator("#grow-curves").screenshot(path=ARTIFACTS / "grow-curves-phase-change.png")
    shot(page, "grow-1024x768-enlarged")
    page.click("#panel-enlarge")
    problems = audit.problems(page, 16, 16, PANEL)
    assert problems == [], problems
    assert serious(page) == []
    shot(page, "grow-1024x768")

    # the slider at step 0, opened on the stage: the grown model's own page, a prompt of its syllables
    page.focus("#grow-slider")
    page.keyboard.press("Home")
    assert page.text_content("#grow-chosen").startswith("step 0:")
    first = found["checkpoints"][0]["model"]
    page.click("#grow-open")
    page.wait_for_url(f"**model={first}**")
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    assert page.locator("#model-picker").input_value() == first
    assert page.locator("#tokens .token").count() == 20  # ten syllables twice, no [UNK]
    layer, head = found["checkpoints"][-1]["scores"]["induction_head"]
    assert f"layer={layer}&head={head}&token=13" in page.url  # the induction head, at a token of the second copy
    wait_until(page, "!document.getElementById('grow-slider').disabled")
    before = page.evaluate("document.body.dataset.run")

    # on that page the slider reruns the prompt in place: the last checkpoint's run
    page.focus("#grow-slider")
    page.keyboard.press("End")
    last = found["checkpoints"][-1]["model"]
    wait_until(page, f"document.body.dataset.run !== '{before}' && document.body.dataset.busy === 'false'")
    assert page.locator("#model-picker").input_value() == last
    assert f"model={last}" in page.url
    assert "(on the stage)" in page.text_content("#grow-chosen")
    heatmap = page.get_attribute("#heatmap", "data-view") or ""
    assert heatmap.startswith(page.evaluate("document.body.dataset.run"))
    shot(page, "grow-checkpoint-on-stage-1024x768")

    # a phone reads the panel too
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator(PANEL).scroll_into_view_if_needed()
    page.wait_for_timeout(300)  # the charts follow the panel's width
    problems = audit.problems(page, 0, 0, PANEL, page_scrolls=True)
    assert problems == [], problems
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=ARTIFACTS / "grow-phone-390.png", full_page=True)
    httpx.post(f"{server}/api/train/{train_id}/cancel", timeout=30)
    context.close()
    assert errors == [], errors
