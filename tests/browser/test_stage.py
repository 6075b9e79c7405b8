"""Issue #11, "The class stage": the page as a class sees it, measured.

At every common projector and laptop size, normal and in presentation mode, the prompt, the token strip, the
heatmap and the attends view are wholly on the first screen and the page does not scroll; the heatmap is a
square of at least 40% of the window's height, drawn at the screen's pixel density. On phones nothing
scrolls sideways, the heatmap fits the width and zooms, and a tap selects. The tour never covers the heatmap
or what its step explains. axe-core finds no serious or critical violation.
"""

import re
from contextlib import contextmanager

import numpy as np
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS, check_local, screenshot, wait_until, watched
from tests.browser.test_page import DEFAULT_TEXT, cell_centre, run_id

pytestmark = pytest.mark.slow

DESKTOPS = [
    (1024, 768),
    (1280, 720),
    (1280, 800),
    (1366, 768),
    (1440, 900),
    (1536, 864),
    (1600, 900),
    (1920, 1080),
    (2560, 1440),
]
PHONES = [(360, 740), (375, 667), (390, 844), (412, 915), (430, 932)]
MODES = {"normal": "", "present": "present=1"}
CANVAS = "#heatmap .hm-canvas"
CORE = ["#prompt", "#tokens", "#heatmap", CANVAS, "#attends"]
PANELS = ["dissection", "grid", "pipeline", "pooled", "lessons", "write", "grow"]
# What each tour step explains (tests/browser/test_lessons_tour.py has the same list).
TOUR_TARGETS = {1: "tokens", 2: "tokens", 3: "pipeline", 4: "pipeline", 5: "pipeline", 6: "dissection"}
TOUR_TARGETS |= {7: "dissection", 8: "heatmap", 9: "dissection", 10: "dissection", 11: "pipeline", 12: "pipeline"}
TOUR_TARGETS |= {13: "grid", 14: "pooled", 15: "pooled"}


@contextmanager
def lab_page(browser, width: int, height: int, **options):
    """A page in a context of its own (a size, a pixel ratio, a phone, CSP bypassed for axe), with the `page`
    fixture's guarantees: no request leaves 127.0.0.1 and the page raises nothing."""
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    try:
        with page_in(context) as page:
            yield page
    finally:
        context.close()


@contextmanager
def page_in(context, width: int | None = None, height: int | None = None):
    """A new page (tab) of a context that tests share (its options, its HTTP cache), sized `width`×`height` if
    given, with the `page` fixture's guarantees: no request leaves 127.0.0.1 and the page raises nothing."""
    page = context.new_page()
    if width:
        page.set_viewport_size({"width": width, "height": height})
    watched(page)
    try:
        yield page
    finally:
        page.close()
    check_local(page)


@pytest.fixture(scope="module")
def desktop(browser):
    """A projector's or a laptop's context the desktop tests share: each opens a tab of its own in it, at its size."""
    context = browser.new_context()
    yield context
    context.close()


def open_stage(page, server, *query: str):
    page.goto(f"{server}/?{'&'.join(q for q in query if q)}")
    run_id(page)
    wait_until(
        page, "document.getElementById('heatmap')?.dataset.view && document.querySelector('#heatmap .hm-canvas')"
    )


MEASURE = """(selectors) => {
  const box = (node) => {
    if (!node) return null;
    const b = node.getBoundingClientRect();
    return { x: b.left, y: b.top, right: b.right, bottom: b.bottom, width: b.width, height: b.height };
  };
  const canvas = document.querySelector('#heatmap .hm-canvas');
  const root = document.scrollingElement;
  return {
    width: innerWidth, height: innerHeight, dpr: devicePixelRatio, scrollX, scrollY,
    scrollWidth: root.scrollWidth, scrollHeight: root.scrollHeight,
    boxes: Object.fromEntries(selectors.map((s) => [s, box(document.querySelector(s))])),
    canvas: box(canvas), backing: canvas ? [canvas.width, canvas.height] : null,
    blind: document.getElementById('heatmap')?.dataset.view === 'blind',
    present: document.body.classList.contains('present'),
    prompt: (() => {
      const prompt = document.getElementById('prompt');
      const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
      return { rems: prompt.clientWidth / rem, whole: prompt.scrollHeight <= prompt.clientHeight + 1 };
    })(),
  };
}"""

# Waited for in the page, frame by frame, until `timeout` ms: the fonts loaded, nothing the page says it is
# computing (a run: body[data-busy]; a view waiting for its numbers: aria-busy), no CSS transition or finite
# animation running, every shown Plotly chart laid out for its box (`responsive` redraws 100 ms after a resize),
# the heatmap's canvas drawn for its size (the ResizeObserver has run), and the same measurement over `frames`
# frames running. Returns that measurement, or the last one taken when the time is up.
SETTLE = f"""async ({{ selectors, frames, timeout }}) => {{
  const measure = {MEASURE};
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const shown = (node) => node.checkVisibility();
  const computing = () =>
    document.body.dataset.busy === 'true' || [...document.querySelectorAll('[aria-busy="true"]')].some(shown);
  const moving = () => document.getAnimations().some(
    (a) => a.playState === 'running' && a.effect?.getComputedTiming().iterations !== Infinity);
  const chartsFit = () => [...document.querySelectorAll('.js-plotly-plot')].filter(shown).every((chart) => {{
    const svg = chart.querySelector('.main-svg');
    return !svg || Math.abs(svg.getBoundingClientRect().width - chart.clientWidth) <= 1;
  }});
  const crisp = (m) => m.blind || !(m.canvas && m.canvas.width)
    || Math.abs(m.backing[0] - Math.round(m.canvas.width * m.dpr)) <= 1;
  const deadline = performance.now() + timeout;
  await document.fonts.ready;
  let m = measure(selectors);
  let seen = JSON.stringify(m);
  let same = 1;
  while (performance.now() < deadline) {{
    await frame();
    m = measure(selectors);
    const now = JSON.stringify(m);
    same = now === seen ? same + 1 : 1;
    seen = now;
    if (same >= frames && !computing() && !moving() && chartsFit() && crisp(m)) return m;
  }}
  return m;
}}"""


def crisp(m: dict) -> bool:
    """The heatmap's canvas drawn for its size (whichever boxes a test waits for): none shown, or blank while a
    class votes blind, nothing to draw."""
    canvas, backing = m["canvas"], m["backing"]
    if m["blind"] or not (canvas and canvas["width"]):
        return True
    return abs(backing[0] - round(canvas["width"] * m["dpr"])) <= 1


def settle(page, selectors=CORE, timeout=8.0) -> dict:
    """Waits for the layout after a load or a resize, in the page (SETTLE): a quiet page measured the same over
    three frames running, a frame or two after it is drawn rather than three round trips 100 ms apart."""
    return page.evaluate(SETTLE, {"selectors": selectors, "frames": 3, "timeout": timeout * 1000})


def off_screen(box, m) -> bool:
    return box["x"] < -0.5 or box["y"] < -0.5 or box["right"] > m["width"] + 0.5 or box["bottom"] > m["height"] + 0.5


def stage_problems(m: dict, label: str, selectors=CORE) -> list[str]:
    """Everything wrong with one measured layout, in words."""
    problems = []
    if m["scrollY"] != 0 or m["scrollX"] != 0:
        problems.append(f"{label}: scrolled to {m['scrollX']},{m['scrollY']}")
    if m["scrollHeight"] > m["height"] + 1:
        problems.append(f"{label}: the page scrolls: {m['scrollHeight']} px tall in a {m['height']} px window")
    if m["scrollWidth"] > m["width"]:
        problems.append(f"{label}: the page scrolls sideways: {m['scrollWidth']} px in a {m['width']} px window")
    # The prompt keeps room for a sentence and shows all of it (options wrap rather than squeeze it), but
    # for presentation mode on a screen under 1200×900, where the heatmap's height wins (lab.css).
    if not (m["present"] and m["width"] < 1200 and m["height"] < 900):
        if m["prompt"]["rems"] < 15:
            problems.append(f"{label}: the prompt is {m['prompt']['rems']:.1f} rem wide")
        if not m["prompt"]["whole"]:
            problems.append(f"{label}: the prompt hides part of its text")
    for selector in selectors:
        box = m["boxes"][selector]
        if box is None or box["width"] == 0 or box["height"] == 0:
            problems.append(f"{label}: {selector} is missing or hidden")
        elif off_screen(box, m):
            problems.append(f"{label}: {selector} leaves the first screen: {rounded(box)}")
    canvas = m["boxes"][CANVAS]
    if canvas and canvas["width"]:
        if abs(canvas["width"] - canvas["height"]) > 1:
            problems.append(f"{label}: the heatmap is not square: {canvas['width']}×{canvas['height']}")
        if canvas["height"] < 0.4 * m["height"]:
            problems.append(f"{label}: the heatmap is {canvas['height']:.0f} px, under 40% of {m['height']}")
        if not crisp(m):
            problems.append(f"{label}: canvas backing store {m['backing']} for {canvas['width']} css px × {m['dpr']}")
    return problems


def rounded(box) -> dict:
    return {key: round(value) for key, value in box.items()}


def overlap(a, b) -> bool:
    return (
        a["x"] < b["right"] - 0.5
        and b["x"] < a["right"] - 0.5
        and a["y"] < b["bottom"] - 0.5
        and b["y"] < a["bottom"] - 0.5
    )


# --- projectors and laptops ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_core_views_fill_the_first_screen_at_every_size(desktop, server, mode):
    problems = []
    with page_in(desktop, *DESKTOPS[0]) as page:
        open_stage(page, server, MODES[mode])
        assert ("present" in page.evaluate("document.body.className")) == (mode == "present")
        for width, height in DESKTOPS:
            page.set_viewport_size({"width": width, "height": height})
            m = settle(page)
            problems += stage_problems(m, f"{width}×{height} {mode}")
            if (width, height) == (1280, 720) and mode == "present":
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=ARTIFACTS / "stage-1280x720-present.png")  # the README's picture
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mode", MODES)
def test_a_fresh_load_at_each_size_fits_too(desktop, server, mode):
    """Loaded at its size (not resized to it): the layout a class gets when the projector is already on."""
    problems = []
    with page_in(desktop, 1024, 768) as page:  # one tab, loading the page afresh at each size
        for width, height in [(1024, 768), (1280, 720), (1920, 1080)]:
            page.set_viewport_size({"width": width, "height": height})
            open_stage(page, server, MODES[mode])
            problems += stage_problems(settle(page), f"{width}×{height} {mode}, loaded")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mode", MODES)
def test_an_open_panel_leaves_the_core_views_on_screen(desktop, server, mode):
    problems = []
    selectors = [*CORE, "#grid"]
    with page_in(desktop, 1024, 768) as page:
        open_stage(page, server, MODES[mode], "panel=grid")
        expect(page.locator("#panel-tab-grid")).to_have_attribute("aria-selected", "true")
        for width, height in [(1024, 768), (1280, 720), (1920, 1080)]:
            page.set_viewport_size({"width": width, "height": height})
            m = settle(page, selectors)
            problems += stage_problems(m, f"{width}×{height} {mode} panel=grid")
            grid = m["boxes"]["#grid"]
            if not page.locator("#grid").is_visible() or grid["y"] >= m["height"] or grid["bottom"] <= 0:
                problems.append(f"{width}×{height} {mode}: #grid is not in sight: {grid and rounded(grid)}")
    assert not problems, "\n".join(problems)


def test_the_panels_are_tabs_and_the_open_one_is_in_the_url(desktop, server):
    with page_in(desktop, 1280, 720) as page:
        open_stage(page, server)
        assert page.locator("[role=tablist]").count() >= 1
        for panel in PANELS:
            tab = page.locator(f"#panel-tab-{panel}")
            assert tab.get_attribute("role") == "tab"
            tab.click()
            expect(tab).to_have_attribute("aria-selected", "true")
            expect(page.locator(f"#{panel}")).to_be_visible()
            wait_until(page, f"new URLSearchParams(location.search).get('panel') === '{panel}'")
            others = [p for p in PANELS if p != panel]
            selected = [page.locator(f"#panel-tab-{p}").get_attribute("aria-selected") for p in others]
            assert selected == ["false"] * len(others)
            assert stage_problems(settle(page), f"panel={panel}") == []


def test_the_heatmap_redraws_crisply_when_the_window_shrinks(desktop, server):
    with page_in(desktop, 1280, 720) as page:
        open_stage(page, server)
        before = settle(page)
        assert stage_problems(before, "1280×720") == []
        page.set_viewport_size({"width": 1024, "height": 768})
        after = settle(page)
        assert after["boxes"][CANVAS]["width"] != before["boxes"][CANVAS]["width"], "the heatmap kept its size"
        assert after["backing"] != before["backing"], "the canvas was not redrawn"
        assert stage_problems(after, "1280×720 → 1024×768") == []


def test_a_high_density_screen_gets_a_high_density_canvas(browser, server):
    with lab_page(browser, 1280, 720, device_scale_factor=2) as page:
        open_stage(page, server)
        m = settle(page)
        assert m["dpr"] == 2
        assert stage_problems(m, "1280×720 @2x") == []
        width = m["boxes"][CANVAS]["width"]
        assert m["backing"][0] == round(width * 2) and m["backing"][1] == round(m["boxes"][CANVAS]["height"] * 2)


# --- phones ----------------------------------------------------------------------------------------------------

PHONE_PARTS = ["#prompt", "#tokens", "#heatmap", CANVAS, "#attends", "[role=tablist]"]


@pytest.fixture(scope="module")
def phone(browser):
    """A phone's context (touch, 3× pixels) the phone tests share: each opens a tab of its own in it."""
    context = browser.new_context(is_mobile=True, has_touch=True, device_scale_factor=3)
    yield context
    context.close()


@pytest.mark.parametrize(("width", "height"), PHONES, ids=[f"{w}x{h}" for w, h in PHONES])
def test_a_phone_gets_one_column_that_never_scrolls_sideways(phone, server, width, height):
    with page_in(phone, width, height) as page:
        open_stage(page, server)
        m = settle(page, PHONE_PARTS)
        assert m["scrollWidth"] <= m["width"], f"scrolls sideways: {m['scrollWidth']} > {m['width']}"
        for selector, box in m["boxes"].items():
            assert box and box["width"] > 0, f"{selector} is missing"
            assert box["x"] >= -0.5 and box["right"] <= m["width"] + 0.5, f"{selector} sticks out: {rounded(box)}"
        canvas = m["boxes"][CANVAS]
        assert abs(canvas["width"] - canvas["height"]) <= 1 and crisp(m)
        heatmap, tokens = m["boxes"]["#heatmap"], m["boxes"]["#tokens"]
        assert heatmap["y"] >= tokens["bottom"] - 0.5 or heatmap["x"] >= tokens["right"] - 0.5  # not side by side
        assert heatmap["x"] < m["width"] / 2, "one column: the heatmap is not pushed to the right"

        chip = page.locator('#tokens .token[data-index="3"]')
        chip.scroll_into_view_if_needed()
        chip.tap()
        expect(chip).to_have_attribute("aria-selected", "true")
        page.touchscreen.tap(*cell_centre(page, 6, 2))
        wait_until(page, "document.getElementById('heatmap').dataset.selectedRow === '6'")
        expect(page.locator('#tokens .token[data-index="6"]')).to_have_attribute("aria-selected", "true")

        before = page.evaluate("document.getElementById('heatmap').dataset.window")
        page.locator('#heatmap [data-zoom="+"]').tap()
        wait_until(page, f"document.getElementById('heatmap').dataset.window !== {before!r}")
        zoomed = settle(page, PHONE_PARTS)
        assert zoomed["scrollWidth"] <= zoomed["width"] and crisp(zoomed)

        # The search box shows its whole hint ("find a token"), beside the clear button a search box keeps.
        overflow = page.evaluate(HINT_OVERFLOW, "#token-query")
        assert overflow <= 0, f"the search hint is {overflow} px wider than its box"

        for panel in PANELS:  # each panel in the switchable area, opened in turn, fits the width too
            page.locator(f"#panel-tab-{panel}").tap()
            expect(page.locator(f"#panel-tab-{panel}")).to_have_attribute("aria-selected", "true")
            m = settle(page, [*PHONE_PARTS, f"#panel-{panel}"])
            box = m["boxes"][f"#panel-{panel}"]
            assert m["scrollWidth"] <= m["width"], f"{panel}: scrolls sideways: {m['scrollWidth']} > {m['width']}"
            assert box and box["width"] > 0 and box["x"] >= -0.5 and box["right"] <= m["width"] + 0.5, (panel, box)
        if (width, height) == (390, 844):
            page.locator('#heatmap [data-zoom="Reset"]').tap()
            page.evaluate("scrollTo(0, 0)")
            screenshot(page, "phone-390")  # the README's picture, the whole page


HINT_OVERFLOW = """(selector) => {
  // The hint typed in as text: an input whose text does not fit scrolls it (scrollWidth > clientWidth).
  const input = document.querySelector(selector);
  input.value = input.placeholder;
  const overflow = input.scrollWidth - input.clientWidth;
  input.value = '';
  return overflow;
}"""


# --- the tour --------------------------------------------------------------------------------------------------

TOUR_BOX = """() => {
  const tour = document.getElementById('tour');
  const clipped = [tour, ...tour.querySelectorAll('*')]
    .filter((node) => node.getClientRects().length && node.scrollHeight > node.clientHeight + 1)
    .map((node) => [node.id || node.className, getComputedStyle(node).overflowY, node === tour]);
  const scrolls = (overflow) => ['auto', 'scroll'].includes(overflow);
  return clipped.filter(([, overflow, isBox]) => !scrolls(overflow) && (isBox || overflow !== 'visible'));
}"""


def tour_selectors(step: int) -> list[str]:
    """What tour_problems measures at a step: the tour box, the heatmap and the view the step outlines (a view
    in a panel that scrolls is seen through the panel: what the step outlines is that visible area)."""
    return ["#tour", CANVAS, f'[data-tour-target="{TOUR_TARGETS[step]}"]']


def tour_problems(page, step: int, label: str, m: dict | None = None) -> list[str]:
    """Everything wrong with the tour at a step, in words; m: the layout settled with tour_selectors in it."""
    target = TOUR_TARGETS[step]
    shown = f'[data-tour-target="{target}"]'
    m = m or settle(page, tour_selectors(step))
    boxes = m["boxes"] | {f"#{target}": m["boxes"][shown]}
    problems = []
    if not page.locator("#tour").is_visible():
        return [f"{label} step {step}: the tour box is hidden"]
    if off_screen(boxes["#tour"], m):
        problems.append(f"{label} step {step}: the tour box leaves the window: {rounded(boxes['#tour'])}")
    if overlap(boxes["#tour"], boxes[CANVAS]):
        problems.append(f"{label} step {step}: the tour box {rounded(boxes['#tour'])} covers the heatmap")
    if boxes[f"#{target}"] and overlap(boxes["#tour"], boxes[f"#{target}"]):
        problems.append(f"{label} step {step}: the tour box covers #{target} {rounded(boxes[f'#{target}'])}")
    if target in PANELS and page.locator(f"#panel-tab-{target}").get_attribute("aria-selected") != "true":
        problems.append(f"{label} step {step}: the {target} panel was not opened")
    if not page.locator(f"#{target}").is_visible():
        problems.append(f"{label} step {step}: #{target} is not shown")
    else:
        box = boxes[f"#{target}"]
        if box["y"] >= m["height"] or box["bottom"] <= 0 or box["x"] >= m["width"] or box["right"] <= 0:
            problems.append(f"{label} step {step}: #{target} is out of sight: {rounded(box)}")
    clipped = page.evaluate(TOUR_BOX)
    if clipped:
        problems.append(f"{label} step {step}: tour text cut off instead of scrolling: {clipped}")
    return problems


def test_a_tour_link_opens_the_panel_of_its_step(desktop, server):
    with page_in(desktop, 1280, 720) as page:
        open_stage(page, server, "tour=13")
        expect(page.locator("#tour-counter")).to_have_text("Step 13 of 16")
        expect(page.locator("#panel-tab-grid")).to_have_attribute("aria-selected", "true")
        assert tour_problems(page, 13, "?tour=13") == []


def test_long_tour_text_scrolls_inside_the_box(desktop, server):
    with page_in(desktop, 1024, 768) as page:
        open_stage(page, server, "present=1", "tour=6")
        page.evaluate("document.getElementById('tour-text').textContent = 'A long explanation. '.repeat(400)")
        m = settle(page, ["#tour", CANVAS])
        assert not off_screen(m["boxes"]["#tour"], m), rounded(m["boxes"]["#tour"])
        assert not overlap(m["boxes"]["#tour"], m["boxes"][CANVAS])
        assert page.evaluate(TOUR_BOX) == []
        scrolls = page.evaluate(
            """() => {
              for (let node = document.getElementById('tour-text'); node; node = node.parentElement) {
                const overflow = getComputedStyle(node).overflowY;
                if (['auto', 'scroll'].includes(overflow) && node.scrollHeight > node.clientHeight) return true;
                if (node.id === 'tour') return false;
              }
              return false;
            }"""
        )
        assert scrolls, "the long text neither fits nor scrolls inside the tour box"


# --- the keyboard ----------------------------------------------------------------------------------------------

READOUT = re.compile(r"A\[(\d+),(\d+)\] = ([01]\.\d{4}), “(.*)” → “(.*)”")


def readout(page) -> tuple[int, int, str, str, str]:
    text = page.locator("#heatmap-readout").inner_text()
    found = READOUT.search(text)
    assert found, f"unexpected readout: {text!r}"
    row, col, value, query, key = found.groups()
    return int(row), int(col), value, query, key


def test_the_heatmap_is_one_keyboard_stop_with_a_readout(page, server, api):
    page.goto(f"{server}/?layer=2&head=5&token=4")
    run = run_id(page)
    wait_until(page, "document.getElementById('heatmap')?.dataset.view")
    weights = np.array(api.get(f"/api/runs/{run}/layers/2/heads/5").json()["weights"])
    tokens = api.post("/api/analyze", json={"text": DEFAULT_TEXT}).json()["tokens"]
    plot = page.locator("#heatmap .hm-plot")
    assert plot.get_attribute("tabindex") == "0"
    focusable = plot.evaluate(
        """(plot) => plot.querySelectorAll(
             'a[href], button, input, select, textarea, [contenteditable], [tabindex]:not([tabindex="-1"])').length"""
    )
    assert focusable == 0, "the plot is one tab stop: nothing inside it takes the focus"
    live = page.locator("#heatmap-readout")
    assert live.get_attribute("aria-live") in ("polite", "assertive") or live.get_attribute("role") == "status"

    plot.focus()
    seen = []
    for key in ["ArrowDown", "ArrowRight", "ArrowRight", "ArrowDown"]:
        page.keyboard.press(key)
        row, col, value, query, key_text = readout(page)
        assert value == f"{weights[row, col]:.4f}", (row, col)
        assert (query, key_text) == (tokens[row]["label"], tokens[col]["label"])
        seen.append((row, col))
    (r1, c1), (r2, c2), (r3, c3), (r4, c4) = seen
    assert (r2, c2) == (r1, c1 + 1) and (r3, c3) == (r2, c2 + 1) and (r4, c4) == (r3 + 1, c3)
    page.keyboard.press("Enter")
    wait_until(page, f"document.getElementById('heatmap').dataset.selectedRow === '{r4}'")
    expect(page.locator(f'#tokens .token[data-index="{r4}"]')).to_have_attribute("aria-selected", "true")
    page.keyboard.press("Tab")
    assert not page.evaluate("document.querySelector('#heatmap .hm-plot').contains(document.activeElement)")


# --- accessibility -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "present=1", "tour=8"], ids=["plain", "present", "tour"])
def test_axe_finds_no_serious_or_critical_violation(browser, server, query):
    # bypass_csp lets axe-core's script in; the page's own Content-Security-Policy is unchanged.
    with lab_page(browser, 1280, 720, bypass_csp=True) as page:
        open_stage(page, server, query)
        if query == "tour=8":
            expect(page.locator("#tour")).to_be_visible()
        settle(page)
        violations = Axe().run(page).response["violations"]
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    report = "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {[node['target'] for node in v['nodes']]}" for v in serious
    )
    assert not serious, report
