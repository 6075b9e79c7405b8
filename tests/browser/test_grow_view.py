"""Issue 56: a teacher grows a model from the page. A class votes first on which head will become the induction
head (its heads hidden from the page until the reveal); one click on Start grows the induction recipe; the panel
shows its progress, its loss curves with the phase change marked and its heads × steps picture; the checkpoint
slider opens a checkpoint on the stage, and on that page moving the slider reruns the prompt on another
checkpoint in place. Read at 1024×768 and on a 390 phone, checked by axe-core; every learner's page shows the
curves and the step in its first screen at every projector size, and reaches them on a phone. On a lab of its
own, so that the grown models reach no other test's model picker; what the session grew of the recipe
(tests/grown.py) is put in its data folder as that lab would keep it, rather than grown again there."""

import time

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.browser import audit
from tests.browser.conftest import ARTIFACTS, wait_until
from tests.browser.test_classroom import choice_labels, end_class, revealed, start_class, vote_on
from tests.conftest import LabProcess
from tests.grown import RECIPE

PANEL = "#panel-grow"


@pytest.fixture(scope="module")
def grow_lab(tmp_path_factory, request):
    data = tmp_path_factory.mktemp("grow-data")
    lab = LabProcess(tmp_path_factory.mktemp("grow-lab"), env={"ATTENTION_LAB_DATA_DIR": str(data)})
    lab.data = data
    seen = lab.launch()
    request.getfixturevalue("grown_recipe")  # grown on one core (once a session) while the lab starts on the other
    lab.wait_started(seen)
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def server(grow_lab):
    return grow_lab.url


# How many steps the Grow panel's training-loss curve has drawn.
CURVE_POINTS = "(document.getElementById('grow-curves').data?.[0]?.x.length ?? 0)"
# Both charts drawn at their element's width (they follow it with a ResizeObserver).
FOLLOWED = """['grow-curves', 'grow-heads'].every((id) => {
  const chart = document.getElementById(id), svg = chart.querySelector('.main-svg');
  const width = (node) => node.getBoundingClientRect().width;
  return !chart.checkVisibility() || (svg && Math.abs(width(svg) - width(chart)) < 2);
})"""
# The training's step and losses and its curves, each wholly in the viewport as it is scrolled now, or (reached)
# once scrolled to: what is not, with where it is.
IN_SIGHT = """(reached) => ['grow-progress', 'grow-curves'].flatMap((id) => {
  const node = document.getElementById(id);
  if (reached) node.scrollIntoView({ block: 'center' });
  const box = node.getBoundingClientRect();
  const whole = box.height > 0 && box.top >= 0 && box.bottom <= innerHeight && box.left >= 0 && box.right <= innerWidth;
  return whole ? [] : [`#${id} at ${Math.round(box.top)}–${Math.round(box.bottom)} px of ${innerHeight}`];
})"""
# The projector sizes a learner's page is read at (the phones are the learners' own).
SCREENS = [(1024, 768), (1280, 720), (1280, 800), (1366, 768), (1920, 1080)]


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


def test_a_class_is_asked_when_the_loss_will_drop_from_the_grow_panel_before_anything_has_grown(browser, server):
    """Before the recipe is started (this module's lab has grown nothing yet), the teacher's Grow panel asks the
    class when the loss will drop: a phone's learner votes on a range of the recipe's steps while the stage stays
    uncovered, and the reveal says it waits for the drop (the API's test reveals it after)."""
    errors = []
    page = browser.new_context(viewport={"width": 1024, "height": 768}).new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{server}/?panel=grow")
    wait_until(page, "document.body.dataset.run")
    started = start_class(page)
    phone = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    phone.on("pageerror", lambda error: errors.append(f"phone: {error}"))
    phone.goto(started["join_url"])
    phone.click("#class-name-skip")
    try:
        wait_until(page, "!document.getElementById('grow-ask-drop').hidden")
        assert page.locator("#grow-ask").is_visible()
        assert audit.problems(page, 0, 0, PANEL, page_scrolls=True) == []  # both questions' buttons fit
        page.click("#grow-ask-drop")
        assert choice_labels(phone) == ["steps 1–150", "steps 151–300", "steps 301–450", "steps 451–600"]
        assert page.locator("#class-stage").is_hidden() and phone.locator("#class-stage").is_hidden()
        # one question at a time: neither question's button while this one's vote is open
        wait_until(page, "['grow-ask-drop', 'grow-ask'].every((id) => document.getElementById(id).hidden)")
        vote_on(phone, "steps 151–300")
        assert audit.problems(phone, 0, 0, "#class-question", page_scrolls=True) == []
        phone.screenshot(path=ARTIFACTS / "grow-loss-drop-vote-phone-390.png")
        page.click("#class-reveal")
        wait_until(page, "document.getElementById('error').textContent.includes('has not started')")
    finally:
        end_class(server, started)
        phone.context.close()
        page.context.close()
    assert not errors, errors


def test_a_teacher_grows_the_recipe_watches_its_phase_change_and_opens_its_checkpoints(
    browser, server, grow_lab, grown_recipe
):
    """Start goes on from the recipe's last checkpoint on its plateau (step 175 of the 275 its head takes to form,
    the drop starting at 200), the session's, put in the lab's data folder just before as the lab keeps a training
    paused there: the drop and the head's forming still to come, live, with no plateau steps grown again first.
    The plan's pause comes as soon as the teacher's page has started the training, before the head forms however
    fast this machine trains; the learners' pages are read then, paused, and seen to follow the training live once
    it is resumed."""
    errors = []
    context = browser.new_context(viewport={"width": 1024, "height": 768}, bypass_csp=True)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(f"console: {message.text}"))
    page.goto(f"{server}/?present=1")
    wait_until(page, "document.body.dataset.run")
    # a class: before the model grows, it votes on which head will become the induction head
    started = start_class(page)
    learners = []  # three learners' pages, on two phones and a laptop: none opens anything, each follows
    for width, height in [(390, 844), (360, 740), (1280, 720)]:
        learner = browser.new_context(viewport={"width": width, "height": height}).new_page()
        learner.on("pageerror", lambda error, width=width: errors.append(f"learner {width}: {error}"))
        learner.goto(started["join_url"])
        learner.click("#class-name-skip")
        learners.append(learner)
    learner = learners[0]
    # the shipped plan, played: its first step opens the Grow panel and asks the class
    page.click("#plan-edit summary")
    page.click("#plan-grow")
    wait_until(page, "document.getElementById('plan-said').textContent.startsWith('Opened')")
    page.click("#plan-edit summary")
    step = lambda number: (  # noqa: E731
        page.click("#plan-next"),
        wait_until(page, f"document.getElementById('plan-now').dataset.step === '{number}'"),
    )
    step(1)
    assert choice_labels(learner) == ["head 0.0", "head 0.1", "head 1.0", "head 1.1"]
    vote_on(learner, "head 1.1")
    # Four checkpoints before the plateau's last: the class's pause (step 3) lands within the 200 steps (4 s on two
    # cores) before the head forms, however busy the page is; from the plateau's last it had 100 and once missed.
    grown_recipe.in_lab(grow_lab.data, grown_recipe.plateau_step - 4 * RECIPE.checkpoint_every, "paused")
    step(2)  # starts growing the recipe
    wait_until(page, "new URLSearchParams(location.search).get('train')")
    train_id = train_id_of(page)
    assert status_of(server, train_id)["spec"]["layers"] == 2  # {}: the recipe
    step(3)  # the plateau: paused before the head forms
    wait_until(page, "document.getElementById('grow-progress').textContent.startsWith('Paused')")
    paused = status_of(server, train_id)
    assert paused["state"] == "paused" and (paused["phase_change"] or {}).get("formed") is None, paused["step"]
    # every learner's page shows the teacher's training, opening nothing: its curve, its progress
    for one in learners:
        wait_until(one, f"{CURVE_POINTS} > 0", timeout=60)
        wait_until(one, "document.getElementById('grow-progress').textContent.startsWith('Paused')")
        assert one.locator("#grow-curves").is_visible() and one.locator("#grow-start").is_hidden()
    before = [one.evaluate(CURVE_POINTS) for one in learners]
    step(4)  # resumed: every learner's curve advances as the training grows
    for one, points in zip(learners, before, strict=True):
        wait_until(one, f"{CURVE_POINTS} > {points}", timeout=30)
    page.click("#class-fold")  # the class panel folds to a strip: the stage's panels get the room

    # the phase change, drawn as it happens, the heads hidden while the class votes: then paused
    wait_until(page, "document.getElementById('grow-curves').textContent.includes('phase change')", timeout=120)
    deadline = time.monotonic() + 60
    while (formed := status_of(server, train_id)["phase_change"]["formed"]) is None:
        assert time.monotonic() < deadline, "no induction head formed"
        page.wait_for_timeout(200)
    wait_until(page, f"document.getElementById('grow-bar').value >= {formed}")  # the page read a status saying so
    assert page.locator("#grow-heads").is_hidden() and page.locator("#grow-heads-hidden").is_visible()
    assert "induction head" not in page.text_content("#grow-progress") + page.text_content("#grow-chosen")
    for one in learners:  # the phase change marked on every learner's page too
        wait_until(one, "document.getElementById('grow-curves').textContent.includes('phase change')")
    # a learner's page shows the training's step and curves in its first screen at every projector size, under
    # the class's question, and on a phone reaches each of them whole
    laptop, problems = learners[2], []
    for width, height in SCREENS:
        laptop.set_viewport_size({"width": width, "height": height})
        wait_until(laptop, f"innerWidth === {width} && innerHeight === {height} && {FOLLOWED}")
        problems += [f"{width}×{height}: not in the first screen: {out}" for out in laptop.evaluate(IN_SIGHT, False)]
        problems += [f"{width}×{height}: {problem}" for problem in audit.problems(laptop, 0, 0, PANEL)]
        if width in (1024, 1280) and height < 800:
            laptop.screenshot(path=ARTIFACTS / f"grow-learner-follows-{width}x{height}.png")
    for phone in learners[:2]:
        width = phone.viewport_size["width"]
        problems += [f"phone {width}: not reached: {out}" for out in phone.evaluate(IN_SIGHT, True)]
        problems += [f"phone {width}: {problem}" for problem in audit.problems(phone, 0, 0, PANEL, page_scrolls=True)]
    learners[1].screenshot(path=ARTIFACTS / "grow-learner-follows-phone-360.png")
    assert problems == [], problems
    page.click("#grow-pause")
    wait_until(page, "document.getElementById('grow-progress').textContent.startsWith('Paused')")
    for one in learners:
        wait_until(one, "document.getElementById('grow-progress').textContent.startsWith('Paused')")
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
    for one in learners:
        one.context.close()
    page.click("#class-fold")  # the ended class's panel folded away: the stage's panels get the room again
    wait_until(page, "document.getElementById('grow-progress').textContent.includes('induction head')")
    assert page.locator("#grow-heads").is_visible()
    phase = found["phase_change"]["step"]
    assert f"at step {phase}" in page.text_content("#grow-curves")
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
    wait_until(page, FOLLOWED)
    problems = audit.problems(page, 0, 0, PANEL, page_scrolls=True)
    assert problems == [], problems
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=ARTIFACTS / "grow-phone-390.png", full_page=True)
    httpx.post(f"{server}/api/train/{train_id}/cancel", timeout=30)
    context.close()
    assert errors == [], errors


PROJECTORS = [(1024, 768), (1280, 720), (1366, 768), (1600, 900), (1920, 1080)]
PHONES = [(360, 740), (390, 844)]


def grown(lab: LabProcess, grown_recipe) -> dict:
    """A training of the recipe that has formed its induction head: the one the flow above grew, or, when this
    test runs alone, the session's kept in the lab's data folder (paused once it has formed)."""
    for listed in httpx.get(f"{lab.url}/api/train", timeout=30).json()["trainings"]:
        found = status_of(lab.url, listed["train_id"])
        if found["phase_change"] and found["phase_change"]["formed"] is not None:
            return found
    grown_recipe.in_lab(lab.data, grown_recipe.trainer.step, "paused")
    return status_of(lab.url, RECIPE.train_id)


# Every text of the panel's two charts (ticks, titles, the phase change's label, the colour bar) wholly inside its
# chart: audit.js leaves an SVG's text alone, and Plotly draws a label past the plot's edge where it is cut.
CHART_TEXT = """() => {
  const problems = [];
  for (const id of ['grow-curves', 'grow-heads']) {
    const svg = document.querySelector(`#${id} .main-svg`);
    if (!svg || !svg.checkVisibility()) continue;
    const box = svg.getBoundingClientRect();
    for (const text of document.querySelectorAll(`#${id} svg text`)) {
      const r = text.getBoundingClientRect();
      if (!text.textContent.trim() || r.width === 0) continue;
      const past = r.left < box.left - 0.5 || r.right > box.right + 0.5
        || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
      if (past) {
        const at = (b) => `${Math.round(b.left)}–${Math.round(b.right)} px`;
        problems.push(`#${id}: “${text.textContent}” past the chart's edge at ${at(r)} in ${at(box)}`);
      }
    }
  }
  return problems;
}"""


def drawn(page):
    """The panel has read its training and drawn both charts, at its width and in the page's mode's type."""
    grow = "document.getElementById('grow')"
    wait_until(page, f"{grow}.dataset.view && {grow}.ariaBusy === 'false'")
    size = "document.body.classList.contains('present') ? '17px' : '12px'"
    for chart in ("curves", "heads"):
        wait_until(page, f"document.querySelector('#grow-{chart} .xtick text')?.style.fontSize === ({size})")
    wait_until(page, "document.getElementById('grow-curves').textContent.includes('phase change')")
    wait_until(page, FOLLOWED)


def present(page, on: bool):
    if page.evaluate("document.body.classList.contains('present')") != on:
        page.evaluate("document.getElementById('present').click()")


def test_the_grow_panel_is_whole_at_every_projector_and_phone_in_present_too(browser, server, grow_lab, grown_recipe):
    """Issue 56: the panel with a grown training (its curves, the phase change, the heads × steps picture, the
    slider) at the five projector sizes, in presentation mode (on the stage and enlarged over it) and not, and on
    both phones: nothing with a number, a word or a control cut, ellipsised or off-screen, no chart's text past
    its chart; in presentation mode every text at the floor (tests/browser/test_projectors.py)."""
    found = grown(grow_lab, grown_recipe)
    problems = []
    context = browser.new_context(viewport=dict(zip(("width", "height"), PROJECTORS[0], strict=True)))
    page = context.new_page()
    page.goto(f"{server}/?panel=grow&train={found['train_id']}")
    for on in (False, True):
        present(page, on)
        where = "present" if on else "plain"
        for width, height in PROJECTORS:
            page.set_viewport_size({"width": width, "height": height})
            for enlarged in (False, True) if on else (False,):
                if enlarged:
                    page.click("#panel-enlarge")
                page.locator(PANEL).scroll_into_view_if_needed()
                drawn(page)
                label = f"{width}×{height} {where}{' enlarged' if enlarged else ''}"
                floor = (18 if width >= 1280 else 16) if on else 0
                problems += [f"{label}: {p}" for p in audit.problems(page, floor, floor and 16, PANEL)]
                problems += [f"{label}: {p}" for p in page.evaluate(CHART_TEXT)]
                if width in (1024, 1920):
                    shot(page, f"grow-{width}x{height}-{where}{'-enlarged' if enlarged else ''}")
                if enlarged:
                    page.click("#panel-enlarge")
    context.close()
    phone = {"is_mobile": True, "has_touch": True, "device_scale_factor": 3}
    context = browser.new_context(viewport=dict(zip(("width", "height"), PHONES[0], strict=True)), **phone)
    page = context.new_page()
    page.goto(f"{server}/?panel=grow&train={found['train_id']}")
    for width, height in PHONES:
        page.set_viewport_size({"width": width, "height": height})
        for on in (False, True):
            present(page, on)
            page.locator(PANEL).scroll_into_view_if_needed()
            drawn(page)
            label = f"phone {width}{' present' if on else ''}"
            floor = 16 if on else 0
            problems += [f"{label}: {p}" for p in audit.problems(page, floor, floor, PANEL, page_scrolls=True)]
            problems += [f"{label}: {p}" for p in page.evaluate(CHART_TEXT)]
            sideways = page.evaluate("document.scrollingElement.scrollWidth")
            if sideways > width:
                problems.append(f"{label}: the page scrolls sideways ({sideways} px)")
            for chart in ("curves", "heads"):
                name = f"grow-{chart}-phone-{width}{'-present' if on else ''}.png"
                page.locator(f"#grow-{chart}").screenshot(path=ARTIFACTS / name)
    context.close()
    assert not problems, "\n".join(problems)
