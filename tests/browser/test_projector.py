"""Issue #32 on the projector: the teacher's class panel never covers the stage, and its QR code opens large
and closes again; in presentation mode at 1280×720 no visible text is under 18 px (heatmap axis labels,
token chips and the attends view's rows under 16), and a question's votes take at least a third of the stage;
the tour never cuts its own text and never hides what it explains."""

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import wait_until
from tests.browser.test_classroom import Learners, counted, end_class, ready, start_class, viewport_shot, vote_on
from tests.browser.test_stage import CANVAS, lab_page, off_screen, open_stage, overlap, rounded, settle

pytestmark = pytest.mark.slow

STAGE = ["#prompt", "#tokens", "#heatmap", "#attends"]
PANEL = ["#class-panel", "#class-qr-show"]
SIZES = [(1024, 768, False), (1280, 720, True), (1366, 768, False), (1920, 1080, False)]


def panel_problems(page, label: str) -> list[str]:
    m = settle(page, [*STAGE, CANVAS, *PANEL])
    boxes = m["boxes"]
    problems = []
    if m["scrollHeight"] > m["height"] + 1 or m["scrollWidth"] > m["width"]:
        problems.append(f"{label}: the page scrolls ({m['scrollWidth']}×{m['scrollHeight']})")
    for part in STAGE:
        if off_screen(boxes[part], m):
            problems.append(f"{label}: {part} leaves the window: {rounded(boxes[part])}")
        for cover in PANEL:
            if boxes[cover] and boxes[cover]["width"] and overlap(boxes[part], boxes[cover]):
                problems.append(f"{label}: {cover} {rounded(boxes[cover])} covers {part} {rounded(boxes[part])}")
    return problems


def test_the_class_panel_never_covers_the_stage_and_its_qr_code_opens_large(browser, server):
    with lab_page(browser, 1024, 768) as page:
        open_stage(page, server)
        started = start_class(page)
        try:
            problems = []
            for width, height, present in SIZES:
                page.set_viewport_size({"width": width, "height": height})
                if present != ("present" in page.evaluate("document.body.className")):
                    page.click("#present")
                expect(page.locator("#class-panel")).to_be_visible()
                problems += panel_problems(page, f"{width}×{height}{' present' if present else ''}")
            assert not problems, "\n".join(problems)
            # The QR code large, over everything, on demand; Esc and the Close button hide it again.
            page.click("#class-qr-show")
            overlay = page.locator("#class-qr-large img")
            expect(overlay).to_be_visible()
            box = overlay.bounding_box()
            assert box["width"] >= 0.6 * 1080, box  # 1920×1080: most of the window's height
            viewport_shot(page, "class-qr-large-1920x1080")
            page.keyboard.press("Escape")
            expect(page.locator("#class-qr-large")).to_be_hidden()
            assert page.evaluate("document.activeElement.id") == "class-qr-show"
            page.click("#class-qr-show")
            page.click("#class-qr-close")
            expect(page.locator("#class-qr-large")).to_be_hidden()
            # Folded, the panel is a strip and the stage takes the width back.
            before = page.locator("#attends").bounding_box()["width"]
            page.click("#class-fold")
            expect(page.locator("#class-body")).to_be_hidden()
            assert panel_problems(page, "folded") == []
            assert page.locator("#class-panel").bounding_box()["width"] < 100
            wait_until(page, f"document.getElementById('attends').getBoundingClientRect().width > {before}")
        finally:
            end_class(server, started)


# Every visible text node, with its computed size: the type a class reads from the back of the room.
TYPE = """() => {
  const small = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!node.textContent.trim() || parent.closest('script, style, option, .visually-hidden')) continue;
    if (!parent.checkVisibility({ visibilityProperty: true, opacityProperty: true })) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const seen = [...range.getClientRects()].some((r) => r.width > 0 && r.height > 0 && r.bottom > 0 && r.right > 0
      && r.top < innerHeight && r.left < innerWidth);
    if (!seen) continue;
    const size = parseFloat(getComputedStyle(parent).fontSize);
    // Labels, ids, tick labels and numbers may be 16 px (the attends view's rows are tokens and numbers).
    const least = parent.closest('.hm-ylabels, .hm-xlabels, .token, .attend-grid') ? 16 : 18;
    const where = `${parent.tagName.toLowerCase()}.${parent.className}`;
    if (size < least - 0.01) small.push(`${size}px < ${least}: ${where} “${node.textContent.trim().slice(0, 30)}”`);
  }
  return [...new Set(small)];
}"""


def test_present_mode_at_1280x720_is_read_from_the_back_of_the_room(browser, server):
    with lab_page(browser, 1280, 720) as page, lab_page(browser, 390, 844) as phone:
        open_stage(page, server, "present=1", "text=I+sat+on+the+bank+of+the+river+and+the+bank+was+wet", "token=5")
        assert page.evaluate(TYPE) == [], "the stage"
        labels = page.locator("#heatmap .hm-ylabels span").count()
        assert labels >= 8, f"only {labels} row labels"  # fewer labels, never smaller type; but not none
        page.click("#toolbar-more-toggle")
        page.click("#options-toggle")
        assert page.evaluate(TYPE) == [], "More… and Options… open"
        page.click("#options-toggle")  # closes both: a click elsewhere closes an open one
        expect(page.locator("#toolbar-more")).to_be_hidden()
        expect(page.locator("#prompt-options")).to_be_hidden()
        started = start_class(page)
        try:
            phone.goto(started["join_url"])
            ready(phone)
            assert page.evaluate(TYPE) == [], "the class panel"
            page.click("#class-ask")
            phone.wait_for_selector("#class-question .choices button")
            vote_on(phone, "river")
            # Eight more learners on their own devices: a histogram with some spread, as a class votes.
            others = Learners(server, started["code"], 8)
            question = httpx.get(f"{server}/api/classes/{started['code']}").json()["question"]["id"]
            others.vote(question, 1, [8, 8, 0, 0, 0, 11, 6, 4])  # river, [CLS], bank #11, of, the #4
            others.close()
            counted(page, 9)
            assert page.evaluate(TYPE) == [], "a question open"
            page.click("#class-show")
            wait_until(page, "document.getElementById('class-stage').dataset.phase === 'shown'")
            assert page.evaluate(TYPE) == [], "its votes shown"
            shares = page.evaluate(
                """() => {
                  const area = (s) => {
                    const b = document.querySelector(s).getBoundingClientRect();
                    return b.width * b.height;
                  };
                  return area('#class-stage') / area('main.stage');
                }"""
            )
            assert shares >= 1 / 3, f"the votes take {shares:.0%} of the stage"
            expect(page.locator("#class-stage .tally-label")).to_have_text(
                ["[CLS]", "the #4", "of", "river", "bank #11"]
            )
            wait_until(page, "document.getElementById('class-presence').dataset.learners === '9'")
            page.click("#class-fold")  # projected: the panel folds to a strip, the votes take the stage
            expect(page.locator("#class-body")).to_be_hidden()
            assert page.evaluate(TYPE) == [], "the panel folded"
            viewport_shot(page, "class-votes-present-1280x720")  # the README's picture
            page.click("#class-fold")
            page.click("#class-reveal")
            wait_until(page, "document.getElementById('class-stage').hidden")
            assert page.evaluate(TYPE) == [], "revealed"
        finally:
            end_class(server, started)
