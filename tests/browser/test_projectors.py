"""Issue #44, the lesson at any projector: at 1024×768, 1280×720, 1280×800, 1366×768 and 1920×1080, in
presentation mode, with the class panel open and folded, at every phase of a question (asked, votes shown, a
second round, revealed) and at a lesson plan's step, nothing that carries a number, a token or a control is
cut, ellipsised or past the window (tests/browser/audit.js), every text is at or above the floor (18 px body
and 16 px labels and numbers from 1280×720 up, 16 px everything at 1024×768), the attends view shows every
row of a 16-token prompt, the revealed answer's row is in sight without scrolling inside a view, and the
panel never covers the prompt, the tokens, the heatmap or the attends view. On phones (360 and 390 wide) the
page never scrolls sideways, Present included. The tour never cuts its own text and scrolls each step's view
into sight at every size."""

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from app.engine import search
from tests.browser import audit
from tests.browser.conftest import wait_until
from tests.browser.test_classroom import (
    Learners,
    counted,
    end_class,
    float32_attention,
    labels_of,
    start_class,
    viewport_shot,
)
from tests.browser.test_stage import (
    CANVAS,
    PANELS,
    TOUR_TARGETS,
    lab_page,
    off_screen,
    open_stage,
    overlap,
    rounded,
    settle,
    tour_problems,
    tour_selectors,
)

pytestmark = pytest.mark.slow

PROJECTORS = [(1024, 768), (1280, 720), (1280, 800), (1366, 768), (1920, 1080)]
PHONES = [(360, 740), (390, 844)]
TEXT = "a dog saw a cat and a bird near a tree by the barn"  # 16 tokens with [CLS] and [SEP]; "a" four times
TOKENS = 16
SCOPE = "header.topbar, main.stage, #class-panel"
STAGE = ["#prompt", "#tokens", "#heatmap", "#attends"]


def floor(width: int) -> int:
    """The type floor in presentation mode: 16 px for everything at 1024×768, 18 px for body text above."""
    return 16 if width < 1280 else 18


COVERED = """(parts) => {
  const box = (selector) => {
    const b = document.querySelector(selector)?.getBoundingClientRect();
    return b && b.width ? b : null;
  };
  const panel = box('#class-panel');
  const meets = (a, b) =>
    a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  return parts.filter((part) => panel && box(part) && meets(panel, box(part)));
}"""

ANSWER_IN_SIGHT = """() => {
  const row = document.querySelector('#attends .attend-row.answer');
  if (!row) return 'no answer row';
  const view = document.getElementById('attends').getBoundingClientRect();
  const b = row.getBoundingClientRect();
  const weight = row.querySelector('.attend-weight').getBoundingClientRect();
  const inside = (r) => r.top >= view.top - 0.5 && r.bottom <= Math.min(view.bottom, innerHeight) + 0.5
    && r.left >= view.left - 0.5 && r.right <= view.right + 0.5;
  if (inside(b) && inside(weight)) return null;
  const at = (r) => `${Math.round(r.top)}–${Math.round(r.bottom)} px`;
  return `the answer's row at ${at(b)}, the view at ${at(view)}`;
}"""


# The class panel's head, its question's buttons and "End the class": in sight wherever the panel's content is
# scrolled (as it is, at its top, at its end), each wholly inside the window and every box that clips it, and
# on top (what is at its centre is itself).
PANEL_KEYS = """() => {
  const body = document.getElementById('class-body');
  if (!body || !body.checkVisibility()) return [];
  const keys = ['#class-title', '#class-fold', '#class-ask-title', '#class-kind', '#class-ask', '#class-show',
    '#class-again', '#class-close', '#class-reveal', '#class-end'];
  let box = document.getElementById('class-phase');
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowY)) box = box.parentElement;
  const before = box.scrollTop;
  const problems = [];
  for (const [where, top] of [['as it is', before], ['at its top', 0], ['at its end', box.scrollHeight]]) {
    box.scrollTop = top;
    for (const key of keys) {
      const node = document.querySelector(key);
      if (node.hidden) continue;
      const r = node.getBoundingClientRect();
      let out = r.top < -0.5 || r.left < -0.5 || r.bottom > innerHeight + 0.5 || r.right > innerWidth + 0.5;
      for (let up = node.parentElement; up && !out; up = up.parentElement) {
        const s = getComputedStyle(up);
        if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
        const b = up.getBoundingClientRect();
        out = r.top < b.top - 0.5 || r.left < b.left - 0.5 || r.bottom > b.bottom + 0.5 || r.right > b.right + 0.5;
      }
      const top = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
      const at = `${Math.round(r.top)}–${Math.round(r.bottom)} px`;
      if (out || !node.contains(top)) problems.push(`the class panel's content ${where}: ${key} out of sight at ${at}`);
    }
  }
  box.scrollTop = before;
  return problems;
}"""

# The class's gain in the panel: wholly inside the box the panel's content scrolls in, and in the window.
GAIN_IN_SIGHT = """() => {
  const gain = document.getElementById('class-gain');
  let box = gain.parentElement;
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowY)) box = box.parentElement;
  const r = gain.getBoundingClientRect();
  const b = box.getBoundingClientRect();
  const inside = r.top >= Math.max(b.top, 0) - 0.5 && r.bottom <= Math.min(b.bottom, innerHeight) + 0.5;
  const at = (x) => `${Math.round(x.top)}–${Math.round(x.bottom)} px`;
  return inside ? null : `the gain at ${at(r)}, the box it scrolls in at ${at(b)}`;
}"""


def read(page, label: str, width: int) -> list[str]:
    """Everything a class could not read on this screen, in words."""
    problems = audit.problems(page, floor(width), 16, SCOPE)
    problems += page.evaluate(PANEL_KEYS)
    rows = page.evaluate(audit.ATTENDS_ROWS)
    if rows["rows"] and rows["seen"] < rows["rows"]:
        problems.append(f"the attends view shows {rows['seen']} of {rows['rows']} rows")
    problems += [f"the class panel covers {part}" for part in page.evaluate(COVERED, STAGE)]
    return [f"{label}: {problem}" for problem in problems]


def every_projector(page, label: str, then=None) -> list[str]:
    """The page read at every projector size in turn (resized, settled), and left at the first: `then(width,
    height)` may check more at each."""
    problems = []
    for width, height in PROJECTORS:
        page.set_viewport_size({"width": width, "height": height})
        settle(page, ["#prompt", "#tokens", "#attends", "#heatmap .hm-canvas", "#class-panel"])
        problems += read(page, f"{width}×{height}, {label}", width)
        if then:
            problems += then(width, height)
    page.set_viewport_size(dict(zip(("width", "height"), PROJECTORS[0], strict=True)))
    return problems


def test_a_lesson_in_present_is_whole_at_every_projector_and_phase_panel_open_and_folded(browser, server):
    problems = []
    with lab_page(browser, *PROJECTORS[0]) as page:
        open_stage(page, server, "present=1", f"text={TEXT}", "token=5")
        assert page.locator("#tokens .token").count() == TOKENS
        problems += every_projector(page, "the stage")
        started = start_class(page)
        learners = Learners(server, started["code"], 3)
        try:
            expect(page.locator("#class-panel")).to_be_visible()
            page.select_option("#class-kind", "patch-position")  # with its input B in the panel
            problems += every_projector(page, "the class panel open")
            page.select_option("#class-kind", "attends")
            for folded in (False, True):
                if folded:
                    page.click("#class-fold")
                    expect(page.locator("#class-body")).to_be_hidden()
                where = "folded" if folded else "open"
                # The flow's buttons are in the panel; folded, the teacher unfolds to press one, as in class.
                press = lambda button: page.evaluate(f"document.getElementById('{button}').click()")  # noqa: E731
                press("class-ask")
                wait_until(page, "document.getElementById('class-stage').dataset.phase === 'open'")
                question = httpx.get(f"{server}/api/classes/{started['code']}").json()["question"]["id"]
                learners.vote(question, 1, [0, 5, 5])
                counted(page, 3)
                problems += every_projector(page, f"asked, panel {where}")
                press("class-show")
                wait_until(page, "document.getElementById('class-stage').dataset.phase === 'shown'")
                problems += every_projector(page, f"votes shown, panel {where}")
                press("class-again")
                wait_until(page, "document.getElementById('class-stage').dataset.round === '2'")
                learners.vote(question, 2, [0, 0, 5])
                problems += every_projector(page, f"round 2, panel {where}")
                press("class-reveal")
                wait_until(page, "document.getElementById('class-stage').hidden")
                wait_until(page, "document.querySelector('#attends .attend-row.answer')")

                def answer_in_sight(width, height, where=where):
                    seen = page.evaluate(ANSWER_IN_SIGHT)
                    if (width, height) == (1024, 768) and where == "open":
                        viewport_shot(page, "class-revealed-present-1024x768")
                    return [] if seen is None else [f"{width}×{height}, revealed, panel {where}: {seen}"]

                problems += every_projector(page, f"revealed, panel {where}", answer_in_sight)
            # The view moved off the one the question was asked in, no view marks the answer: the stage says it,
            # in the question's measure.
            run_id = page.evaluate("document.body.dataset.run")
            row = float32_attention(server, run_id)[0, 0, 5]
            answer = int(np.argmax(row))  # "cat"'s largest weight, from NumPy
            labels = labels_of(httpx.post(f"{server}/api/analyze", json={"text": TEXT}).json()["tokens"])
            verdict = page.locator("#class-verdict")
            expect(verdict).to_be_hidden()
            page.select_option("#head", "1")
            expect(verdict).to_have_text(f"The answer: “{labels[answer]}”, attention weight {row[answer]:.4f}.")
            page.select_option("#head", "0")
            expect(verdict).to_be_hidden()
            # A pre-test and a post-test, asked through the API as a plan's steps ask them: the gain on the panel.
            secret = {"X-Class-Secret": started["secret"]}
            wrong = (answer + 1) % TOKENS
            for test, votes in (("pre", [answer, wrong, wrong]), ("post", [answer, answer, wrong])):
                ask = {"kind": "attends", "run_id": run_id, "token": 5, "layer": 0, "head": 0, "test": test}
                asked = httpx.post(f"{server}/api/classes/{started['code']}/question", json=ask, headers=secret)
                assert asked.status_code == 201, asked.text
                learners.vote(asked.json()["id"], 1, votes)
                closed = httpx.post(f"{server}/api/classes/{started['code']}/question/close", headers=secret)
                assert closed.status_code == 200, closed.text
            page.click("#class-fold")  # unfolded again
            wait_until(page, "!document.getElementById('class-gain').hidden")
            # The room sees it on the stage, large, as the closed post-test waits for its reveal: 1 of 3 right in
            # the pre-test, 2 of 3 in the post-test, ⟨g⟩ = (2/3 − 1/3) / (1 − 1/3) = 0.50.
            staged = page.locator("#class-stage .class-gain-line")
            expect(staged).to_contain_text("pre-test 33% right → post-test 67% right")
            expect(staged).to_contain_text("= 0.50")
            gain = page.locator("#class-gain").bounding_box()
            assert gain["y"] >= 0 and gain["y"] + gain["height"] <= PROJECTORS[0][1], (
                f"the gain is not in sight: {gain}"
            )
            viewport_shot(page, "class-gain-present-1024x768")

            def gain_in_sight(width, height):
                seen = page.evaluate(GAIN_IN_SIGHT)
                if (width, height) == (1280, 720):
                    viewport_shot(page, "class-gain-present-1280x720")
                return [] if seen is None else [f"{width}×{height}, the gain said: {seen}"]

            problems += every_projector(page, "the gain said", gain_in_sight)
            # A lesson plan's step: the sample plan's first, played.
            page.click("#plan-edit summary")
            page.click("#plan-sample")
            wait_until(page, "document.getElementById('plan-said').textContent.startsWith('Opened')")
            problems += every_projector(page, "the plan editor")
            page.click("#plan-edit summary")
            page.click("#plan-next")
            wait_until(page, "document.getElementById('plan-now').dataset.step === '1'")
            wait_until(
                page, "document.body.dataset.busy === 'false' && document.getElementById('heatmap').dataset.view"
            )
            problems += every_projector(page, "a plan's step")
        finally:
            learners.close()
            end_class(server, started)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("width", "height"), PHONES, ids=[f"{w}x{h}" for w, h in PHONES])
def test_present_on_a_phone_fits_its_width(browser, server, width, height):
    with lab_page(browser, width, height, is_mobile=True, has_touch=True, device_scale_factor=3) as page:
        open_stage(page, server, "present=1", f"text={TEXT}", "token=5")
        settle(page, ["#prompt", "#attends"])
        seen = page.evaluate(
            "[document.scrollingElement.scrollWidth, innerWidth, document.getElementById('prompt').clientWidth]"
        )
        assert seen[0] <= seen[1], f"the page scrolls sideways: {seen[0]} px in {seen[1]}"
        assert seen[2] >= 0.4 * width, f"the prompt is {seen[2]} px wide"
        assert audit.problems(page, 16, 16, "header.topbar, main.stage", page_scrolls=True) == []
        viewport_shot(page, f"present-phone-{width}")


@pytest.mark.parametrize(("width", "height"), PHONES, ids=[f"{w}x{h}" for w, h in PHONES])
def test_a_phone_in_class_reads_everything_from_join_to_reveal(browser, server, width, height):
    """A learner's phone: the name asked as it joins, the view it follows, a question's choices, the reveal and
    Present, each with nothing cut and no sideways scrolling."""
    problems = []
    phone_options = {"is_mobile": True, "has_touch": True, "device_scale_factor": 3}
    with lab_page(browser, 1280, 720) as teacher, lab_page(browser, width, height, **phone_options) as phone:
        open_stage(teacher, server, f"text={TEXT}", "token=5")
        started = start_class(teacher)
        try:

            def read_phone(label: str):
                found = audit.problems(phone, 0, 0, "header.topbar, #class-bar, main.stage", page_scrolls=True)
                problems.extend(f"{width} {label}: {problem}" for problem in found)

            phone.goto(started["join_url"])
            expect(phone.locator("#class-nickname")).to_be_visible()
            read_phone("joining, the name asked")
            phone.click("#class-name-skip")
            wait_until(phone, "document.getElementById('heatmap').dataset.view")
            read_phone("following")
            teacher.click("#class-ask")
            phone.wait_for_selector("#class-question .choices button")
            read_phone("a question open")
            phone.locator("#class-question .choices button").first.click()
            teacher.click("#class-reveal")
            wait_until(phone, "document.querySelector('#class-question [data-field=reveal]')")
            read_phone("revealed")
            phone.goto(f"{started['join_url']}&present=1")
            wait_until(phone, "document.getElementById('heatmap').dataset.view")
            read_phone("following in Present")
            if width == 390:
                viewport_shot(phone, "class-phone-revealed-present-390")
        finally:
            end_class(server, started)
    assert not problems, "\n".join(problems)


def test_a_search_question_is_whole_at_every_projector_and_on_both_phones(browser, server):
    """Issue #54: a search question's choices are documents, long lines where a token is a word. Asked, its votes
    shown and revealed, each at every projector size in Present with the class panel open, and on both phones:
    nothing cut or ellipsised, every document whole (wrapped)."""
    sample = search.shipped_documents()[::40]
    started = httpx.post(f"{server}/api/search/index", json={"documents": "\n".join(sample)}).json()
    httpx.get(f"{server}/api/search/index/{started['index_id']}", timeout=300).raise_for_status()
    longest = sorted(range(len(sample)), key=lambda line: -len(sample[line]))[:4]  # the lines a label would cut
    query = "where can I borrow money"
    problems = []
    phone_options = {"is_mobile": True, "has_touch": True, "device_scale_factor": 3}
    with (
        lab_page(browser, *PROJECTORS[0]) as page,
        lab_page(browser, *PHONES[0], **phone_options) as small,
        lab_page(browser, *PHONES[1], **phone_options) as large,
    ):
        phones = {PHONES[0][0]: small, PHONES[1][0]: large}
        open_stage(page, server, "present=1", f"text={query}")
        taught = start_class(page)
        learners = Learners(server, taught["code"], 3)
        try:
            for phone in phones.values():
                phone.goto(taught["join_url"])
                phone.click("#class-name-skip")
                wait_until(phone, "document.getElementById('heatmap').dataset.view")

            def read_phones(label: str):
                for width, phone in phones.items():
                    found = audit.problems(phone, 0, 0, "header.topbar, #class-bar, main.stage", page_scrolls=True)
                    problems.extend(f"{width} {label}: {problem}" for problem in found)

            ask = {"kind": "search", "run_id": page.evaluate("document.body.dataset.run")}
            ask |= {"index_id": started["index_id"], "documents": longest}
            secret = {"X-Class-Secret": taught["secret"]}
            asked = httpx.post(f"{server}/api/classes/{taught['code']}/question", json=ask, headers=secret, timeout=60)
            assert asked.status_code == 201, asked.text
            for phone in phones.values():
                expect(phone.locator("#class-question .choices button")).to_have_count(4)
            read_phones("a search question open")
            learners.vote(asked.json()["id"], 1, [0, 1, 2])
            counted(page, 3)
            problems += every_projector(page, "a search question asked")
            page.click("#class-show")
            wait_until(page, "document.getElementById('class-stage').dataset.phase === 'shown'")
            problems += every_projector(page, "a search question's votes shown")
            viewport_shot(page, "class-search-votes-present-1024x768")
            page.click("#class-reveal")
            wait_until(page, "document.getElementById('class-stage').hidden")
            for phone in phones.values():
                wait_until(phone, "document.querySelector('#class-question [data-field=reveal]')")
            # The stage says the answer, its cosine and its place among all the index's documents, in one line.
            revealed = httpx.get(f"{server}/api/classes/{taught['code']}", timeout=30).json()["question"]
            verdict = page.locator("#class-verdict")
            expect(verdict).to_be_visible()
            rank = revealed["ranks"][revealed["answer"]["choice"]]
            assert verdict.inner_text() == (
                f"The answer: “{revealed['answer']['label']}”, cosine {revealed['answer']['value']:.3f}, "
                f"#{rank:,} of all {revealed['ranked']:,}."
            )
            problems += every_projector(page, "a search question revealed")
            viewport_shot(page, "class-search-revealed-present-1024x768")
            read_phones("a search question revealed")
            viewport_shot(large, "class-search-revealed-phone-390")
        finally:
            learners.close()
            end_class(server, taught)
    assert not problems, "\n".join(problems)


LESSONS = ["compare", "masks", "ablation", "patch", "heads", "nearest", "pooling", "difference", "explain"]
LESSONS += ["scoreboard"]


def test_every_experiment_in_present_keeps_the_floor_and_cuts_nothing(browser, server):
    """Each experiment's panel in presentation mode at 1280×720, and the patch grid and the scoreboard once
    computed, on the stage and enlarged over it."""
    width, height = 1280, 720
    problems = []
    with lab_page(browser, width, height) as page:
        for lesson in LESSONS:
            open_stage(page, server, "present=1", "token=5", "panel=lessons", f"lesson={lesson}")
            wait_until(page, f"document.getElementById('lesson-panel').dataset.view?.startsWith('{lesson}:')")
            settle(page, ["#lesson-panel"])
            problems += [f"{lesson}: {p}" for p in audit.problems(page, floor(width), 16, "main.stage")]
        for lesson, button, ready in [
            ("patch", "#patch-run", ".patch-grid .patch-cell"),
            ("scoreboard", "#scoreboard-run", "[data-grid=scoreboard] .patch-cell"),
        ]:
            open_stage(page, server, "present=1", "token=5", "panel=lessons", f"lesson={lesson}")
            page.click(button)
            page.wait_for_selector(ready, timeout=120_000)
            for enlarged in (False, True):
                if enlarged:
                    page.click("#panel-enlarge")
                where = f"{lesson}{' enlarged' if enlarged else ''}"
                problems += [f"{where}: {p}" for p in audit.problems(page, floor(width), 16, "main.stage")]
        viewport_shot(page, f"scoreboard-enlarged-present-{width}x{height}")
    assert not problems, "\n".join(problems)


# Which of the attends view's rows are in sight, what the open panel says it costs them, and whether a panel is
# open.
ROWS_AND_COST = f"""() => {{
  const rows = ({audit.ATTENDS_ROWS})();
  const cost = document.getElementById('panel-cost');
  const said = cost?.checkVisibility() ? cost.innerText.replace(/\\s+/g, ' ').trim() : null;
  return {{ ...rows, said, open: document.querySelector('.panels').classList.contains('open') }};
}}"""
SAID = "`${r.seen} of ${r.rows} rows in sight above. Close the panel`"


def test_an_open_panel_says_what_it_costs_the_attends_view_and_one_click_gives_the_rows_back(browser, server):
    """Present promises every row of a 16-token prompt in the attends view. An open panel under it takes more
    than half the side column (a panel left the room of a strip would help nobody): at each projector size, each
    panel open, with the class panel open and not, every row is in sight (side by side at 1920×1080), or the panel
    says how many are, and its button closes it and every row is back."""
    problems = []

    def until(condition: str) -> dict | None:
        """None once `condition` (of r, the rows and the cost) holds; what the page shows if it does not."""
        try:
            wait_until(page, f"(r => {condition})(({ROWS_AND_COST})())", timeout=3)
        except TimeoutError:
            return page.evaluate(ROWS_AND_COST)
        return None

    with lab_page(browser, *PROJECTORS[0]) as page:
        open_stage(page, server, "present=1", f"text={TEXT}", "token=5")
        for class_panel in (False, True):
            if class_panel:
                page.click("#class-start")
                expect(page.locator("#class-panel")).to_be_visible()
            for width, height in PROJECTORS:
                page.set_viewport_size({"width": width, "height": height})
                where = f"{width}×{height}{', the class panel open' if class_panel else ''}"
                for panel in PANELS:  # each opened in turn; the last one closed from its cost
                    if page.get_attribute(f"#panel-tab-{panel}", "aria-selected") != "true":
                        page.evaluate(f"document.getElementById('panel-tab-{panel}').click()")
                    wrong = until(f"r.open && (r.seen === r.rows ? r.said === null : r.said === {SAID})")
                    if wrong:
                        problems.append(
                            f"{where}, {panel}: {wrong['seen']} of {wrong['rows']} rows, said {wrong['said']}"
                        )
                if page.evaluate(ROWS_AND_COST)["said"] is None:
                    continue
                problems += [f"{where}: {p}" for p in audit.problems(page, floor(width), 16, "#panel-cost")]
                if class_panel and (width, height) in PROJECTORS[:2]:
                    viewport_shot(page, f"panel-cost-present-{width}x{height}")
                page.click("#panel-cost-close")
                wrong = until("!r.open && r.seen === r.rows && r.said === null")
                if wrong:
                    problems.append(f"{where}, closed: {wrong['seen']} of {wrong['rows']} rows in sight")
    assert not problems, "\n".join(problems)


# --- the tour ---------------------------------------------------------------------------------------------------

# Where a step's part of a tall panel is (the page scrolls the panel to it).
PARTS = {
    3: '[data-field="word"]',
    4: '[data-field="position"]',
    5: '[data-field="normalized"]',
    11: ".blocks",
    12: ".blocks",
}

TOUR = """(part) => {
  const box = document.getElementById('tour').getBoundingClientRect();
  const within = (b, o) =>
    b.left >= o.left - 0.5 && b.right <= o.right + 0.5 && b.top >= o.top - 0.5 && b.bottom <= o.bottom + 0.5;
  const inside = (b) => within(b, box);
  const cut = ['tour-counter', 'tour-title', 'tour-text', 'tour-shape', 'tour-back', 'tour-next', 'tour-close']
    .filter((id) => !inside(document.getElementById(id).getBoundingClientRect()));
  const tour = document.getElementById('tour');
  const focus = document.querySelector('.tour-focus');
  const outlined = focus.getBoundingClientRect();
  const screen = { left: 0, top: 0, right: innerWidth, bottom: innerHeight };
  const visible = within(outlined, screen);
  const covers = box.left < outlined.right && outlined.left < box.right
    && box.top < outlined.bottom && outlined.top < box.bottom;
  const inWindow = within(box, screen);
  // A part of a tall panel: its top within the panel's visible area.
  const b = part ? focus.querySelector(part)?.getBoundingClientRect() : null;
  const partShown = !part || (Boolean(b) && b.top >= outlined.top - 1 && b.top < outlined.bottom - 20);
  return { cut, scrolls: tour.scrollHeight > tour.clientHeight + 1, visible, covers, inWindow, partShown };
}"""


SHEET = """() => {
  // A phone's sheet along the bottom: its text whole, and the step's view in sight above it.
  const box = document.getElementById('tour').getBoundingClientRect();
  const view = document.querySelector('.tour-focus').getBoundingClientRect();
  const tour = document.getElementById('tour');
  const seen = Math.min(view.bottom, box.top) - Math.max(view.top, 0);
  return { scrolls: tour.scrollHeight > tour.clientHeight + 1, seen, need: Math.min(view.height, 100),
    sideways: document.scrollingElement.scrollWidth > innerWidth, atBottom: Math.abs(box.bottom - innerHeight) < 1 };
}"""

# One page per kind of screen (a phone's context is a phone's), each size loading the tour's link afresh in it.
TOURS = {"projectors-present": (PROJECTORS, True), "projectors": (PROJECTORS, False), "phones": (PHONES, False)}


@pytest.mark.parametrize("screens", TOURS)
def test_the_tour_keeps_its_text_whole_and_each_view_in_sight(browser, server, screens):
    """Every step at every size: the tour's text whole (never cut, never scrolling), its box in the window, and
    the view it explains in sight, its panel opened and scrolled to the step's part. On a projector the box
    covers neither that view nor the heatmap; on a phone the sheet along the bottom leaves the view in sight
    above it (below, at 360×740, it may cover the heatmap's top while a step explains the tokens)."""
    sizes, present = TOURS[screens]
    phone = sizes is PHONES
    options = {"is_mobile": True, "has_touch": True} if phone else {}
    problems = []
    with lab_page(browser, *sizes[0], **options) as page:
        for width, height in sizes:
            page.set_viewport_size({"width": width, "height": height})
            open_stage(page, server, "present=1" if present else "", "tour=1", "token=5")
            problems += walk_the_tour(page, width, height, present, phone)
    assert not problems, "\n".join(problems)


def walk_the_tour(page, width: int, height: int, present: bool, phone: bool) -> list[str]:
    """The tour opened at step 1, walked with Next to its end: what is wrong at each step, in words."""
    problems = []
    for step in range(1, 17):
        expect(page.locator("#tour-counter")).to_have_text(f"Step {step} of 16")
        label = f"{width}×{height}{' present' if present else ''} step {step}"
        if step in PARTS:
            wait_until(page, f"document.querySelector('{PARTS[step]}')")
        targets = tour_selectors(step) if step in TOUR_TARGETS else []
        m = settle(page, ["#tour", ".tour-focus", CANVAS, *targets, *([PARTS[step]] if step in PARTS else [])])
        if phone:
            seen = page.evaluate(SHEET)
            if seen["scrolls"] or seen["sideways"] or not seen["atBottom"]:
                problems.append(f"{label}: the sheet's text is cut or the page scrolls sideways: {seen}")
            if seen["seen"] < seen["need"] - 1:
                problems.append(f"{label}: {seen['seen']:.0f} px of the step's view in sight above the sheet")
            sheet = m["boxes"]["#tour"]
            if off_screen(sheet, m) or (TOUR_TARGETS.get(step) == "heatmap" and overlap(sheet, m["boxes"][CANVAS])):
                problems.append(f"{label}: the sheet leaves the window or covers the heatmap: {rounded(sheet)}")
        else:
            seen = page.evaluate(TOUR, PARTS.get(step))
            if seen["cut"] or seen["scrolls"] or not seen["inWindow"]:
                problems.append(f"{label}: text cut {seen['cut']}, box scrolls {seen['scrolls']}")
            if not seen["visible"] or seen["covers"]:
                problems.append(f"{label}: the view is out of sight ({seen['visible']}) or covered")
            if not seen["partShown"]:
                problems.append(f"{label}: the panel is not scrolled to {PARTS[step]}")
            if targets:
                problems += tour_problems(page, step, label, m)
        if phone and step == 8:
            viewport_shot(page, f"tour-step-8-phone-{width}")
        if (width, height, present, step) == (1280, 720, True, 3):
            viewport_shot(page, "tour-step-3-present-1280x720")
        if step < 16:
            page.click("#tour-next")
    return problems
