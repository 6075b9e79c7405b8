"""Issue #34: every word on the page is as true as its numbers. What a number is called follows the measure
(readout, title, aria-label, predict-first, a class question, exports); the Measure control is labelled,
explained and says what does not apply; the attends view pairs the right tokens on one baseline; labels,
notices, hints, menus, focus rings and tooltips say and show what is there. Every value is checked against
the API's float32 numbers (NumPy), never against the page."""

import csv
import io
import json
import re

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from app.web.encoding import decode_attention
from tests.browser.conftest import ARTIFACTS, save, screenshot, wait_until
from tests.browser.test_classroom import new_page, ready, start_class
from tests.browser.test_page import cell_centre, run_id, wait_view
from tests.browser.test_stage import DESKTOPS, MODES, PHONES
from tests.test_page_words import leaked

pytestmark = pytest.mark.slow

SYMBOLS = {"weights": "A", "norm": "‖α·f(x)‖", "alti": "ALTI", "alti_rollout": "R"}
NAMES = {
    "weights": "attention weight",
    "norm": "norm-weighted attention",
    "alti": "ALTI contribution",
    "alti_rollout": "ALTI rollout",
}
TEXT = "the bank raised its rates because the economy was strong"
PAIR = "so the river bank was quiet"
LONG = " ".join(["the river bank"] * 120 + ["a heron waited"] + ["by the water"] * 60)


def served(api, run: str, measure: str, layer: int) -> np.ndarray:
    """One block under a measure, [head, query, key], float32 as the API sends it."""
    response = api.get(f"/api/runs/{run}/attention", params={"measure": measure, "dtype": "float32", "layer": layer})
    return decode_attention(response.content, response.headers)[0].astype(np.float64)


def heatmap_state(page) -> dict:
    return page.evaluate(
        """(h => ({
             title: h.title.textContent, measure: h.measure.key, aria: h.container.getAttribute('aria-label'),
             busy: h.container.getAttribute('aria-busy'),
             readout: document.getElementById('heatmap-readout').textContent,
           }))(document.getElementById('heatmap').heatmap)"""
    )


# --- what a number is called ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("measure", list(NAMES))
def test_the_readout_title_and_aria_label_name_the_measure(page, server, api, measure):
    page.goto(f"{server}/?layer=3&head=7&token=9&measure={measure}")
    wait_view(page, "heatmap", 3, 7, 9)
    wait_until(page, "document.getElementById('heatmap').getAttribute('aria-busy') === 'false'")
    shown = heatmap_state(page)
    match = re.fullmatch(r"(.+)\[9,(\d+)\] = (-?\d+\.\d{4}), “.*” → “.*”", shown["readout"])
    assert match, shown["readout"]
    assert match.group(1) == SYMBOLS[measure]
    values = served(api, run_id(page), measure, 3)[0 if measure.startswith("alti") else 7]
    col = int(match.group(2))
    assert col == int(np.argmax(values[9])) and float(match.group(3)) == pytest.approx(values[9, col], abs=5e-5)
    assert f"each the {NAMES[measure]} of a query and a key" in shown["aria"]
    assert "attention weights" not in shown["aria"] or measure == "weights"
    titles = {
        "weights": "block 3, head 7 · ",
        "norm": "norm-weighted block 3, head 7 · ",
        "alti": "ALTI · block 3 · ",
        "alti_rollout": "ALTI rollout · block 3 · ",
    }
    assert shown["title"].startswith(titles[measure])
    cut = "t => t.scrollWidth > t.clientWidth + 1 || t.scrollHeight > t.clientHeight + 1"
    assert not page.locator("#heatmap .hm-title").evaluate(cut)
    assert page.locator("#attends .caption").inner_text().endswith(f"show the {NAMES[measure]} on each token.")


@pytest.mark.parametrize("mode", MODES)
def test_the_longest_title_is_whole_at_every_stage_size(browser, server, mode):
    """The heatmap's title wraps, never cuts, at every desktop and phone size the stage is measured at."""
    view = "measure=norm&head=mean&heads=1,4,9&blocks=mean&token=3"
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        page.goto(f"{server}/?{MODES[mode]}&{view}")
        wait_view(page, "heatmap", 0, "mean", 3)
        title = page.locator("#heatmap .hm-title")
        expect(title).to_have_text("norm-weighted all 6 blocks averaged, heads 1, 4, 9 averaged · bidirectional mask")
        for width, height in DESKTOPS + PHONES:
            page.set_viewport_size({"width": width, "height": height})
            cut = "t => t.scrollWidth > t.clientWidth + 1 || t.scrollHeight > t.clientHeight + 1"
            assert not title.evaluate(cut), f"{width}×{height} {mode}: the title is cut"
            box, plot = title.bounding_box(), page.locator("#heatmap .hm-plot").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= plot["y"]
    finally:
        page.context.close()


def test_the_measure_control_is_labelled_explained_and_says_what_does_not_apply(page, server):
    page.goto(f"{server}/?layer=2&head=5&token=3")
    wait_view(page, "heatmap", 2, 5, 3)
    label = page.locator("label:has(#measure)")
    assert label.is_visible() and label.evaluate("l => l.firstChild.textContent.trim()") == "Measure"
    assert page.locator("#measure option").all_inner_texts() == list(NAMES.values())
    page.click("#measure-help")
    about = page.locator("#measure-about")
    expect(about).to_be_visible()
    assert about.locator(".measure-line").count() == 4
    assert about.locator(".measure-line.current").get_attribute("data-measure") == "weights"
    expect(about).to_contain_text("softmax(QKᵀ/√d)")
    page.keyboard.press("Escape")
    page.locator("#measure-help").focus()
    page.keyboard.press("Escape")
    expect(about).to_be_hidden()
    assert not page.locator("#head").is_disabled()
    page.select_option("#measure", "alti")
    wait_until(page, "document.getElementById('heatmap').heatmap.measure.key === 'alti'")
    assert page.locator("#head").is_disabled() and page.locator("#all-heads").is_disabled()
    assert "one picture per block" in page.locator("label:has(#head)").get_attribute("title")
    assert page.locator("#measure-meaning").text_content().startswith("Token j's share")
    page.select_option("#measure", "norm")
    wait_until(page, "!document.getElementById('head').disabled")


def test_a_view_computing_shows_it_at_once_and_keeps_its_old_title_until_drawn(page, server):
    page.goto(f"{server}/?text={'+'.join(['the river bank was steep'] * 40)}&layer=4&head=2&token=30")
    wait_view(page, "heatmap", 4, 2, 30)
    before = heatmap_state(page)
    # The change and, one task later (well within 100 ms), what the heatmap says about itself.
    during = page.evaluate(
        """() => new Promise((done) => {
             const select = document.getElementById('measure');
             select.value = 'alti';
             select.dispatchEvent(new Event('change'));
             const h = document.getElementById('heatmap').heatmap;
             const seen = () => ({
               busy: h.container.getAttribute('aria-busy'), title: h.title.textContent, measure: h.measure.key,
             });
             setTimeout(() => done(seen()), 30);
           })"""
    )
    assert during == {"busy": "true", "title": before["title"], "measure": "weights"}  # old picture, old name
    wait_until(page, "document.getElementById('heatmap').getAttribute('aria-busy') === 'false'", timeout=60)
    after = heatmap_state(page)
    assert after["measure"] == "alti" and after["title"].startswith("ALTI · block 4")
    assert after["readout"].startswith("ALTI[30,")


# --- predict-first and a class question under a measure switch ---------------------------------------------------


def test_predict_first_asks_again_under_another_measure_and_judges_in_its_own(page, server, api):
    page.goto(f"{server}/?layer=2&head=5&token=10&predict=1")
    wait_until(page, "!document.getElementById('predict-question').hidden && document.querySelector('.predict-choice')")
    run = run_id(page)
    page.locator('.predict-choice[data-index="1"]').click()
    weights = served(api, run, "weights", 2)[5, 10]
    best = page.locator("#predict-result [data-field=best-weight]")
    expect(best).to_have_attribute("data-index", str(int(np.argmax(weights))))
    assert float(best.inner_text()) == pytest.approx(weights.max(), abs=5e-5)

    page.select_option("#measure", "norm")  # a new question, in the new measure: the old verdict is not this view's
    expect(page.locator("#predict-question")).to_be_visible()
    expect(page.locator("#predict-title")).to_contain_text("norm-weighted block 2, head 5")
    expect(page.locator("#predict-question [data-field=asked-under]")).to_contain_text("norm-weighted attention")
    page.locator('.predict-choice[data-index="1"]').click()
    norms = served(api, run, "norm", 2)[5, 10]
    expect(best).to_have_attribute("data-index", str(int(np.argmax(norms))))
    assert float(best.inner_text()) == pytest.approx(norms.max(), abs=5e-5)
    expect(page.locator("#predict-result")).to_contain_text("norm-weighted attention")
    assert page.locator("#predict-result").get_attribute("data-measure") == "norm"

    page.select_option("#measure", "weights")  # back: the weights' own verdict, not the norms'
    expect(best).to_have_attribute("data-index", str(int(np.argmax(weights))))
    assert page.locator("#predict-result").get_attribute("data-measure") == "weights"
    expect(page.locator("#predict-result")).to_contain_text("attention weight")


def test_a_class_question_keeps_and_names_the_measure_it_was_asked_under(browser, server):
    errors = []
    teacher = new_page(browser, 1280, 720, errors)
    teacher.goto(f"{server}/?text={TEXT.replace(' ', '+')}&measure=norm&layer=1&head=3&token=6")
    ready(teacher)
    started = start_class(teacher)
    learner = new_page(browser, 390, 844, errors)
    try:
        learner.goto(started["join_url"])
        ready(learner)
        teacher.click("#class-ask")
        asked = "Asked under the norm-weighted attention (‖α·f(x)‖[i,j]"
        expect(teacher.locator("#class-stage [data-field=asked-under]")).to_contain_text(asked)
        expect(learner.locator("#class-question [data-field=asked-under]")).to_contain_text(asked)
        teacher.select_option("#measure", "weights")  # the view moves on; the question keeps its measure
        wait_until(learner, "document.getElementById('measure').value === 'weights'")
        expect(teacher.locator("#class-stage [data-field=asked-under]")).to_contain_text(asked)
        expect(learner.locator("#class-question [data-field=asked-under]")).to_contain_text(asked)
        teacher.click("#class-reveal")
        run = teacher.evaluate("document.body.dataset.run")
        norms = served(httpx.Client(base_url=server), run, "norm", 1)[3, 6]
        line = f"norm-weighted attention {norms.max():.4f}."
        expect(teacher.locator("#class-phase")).to_contain_text(line)
        expect(learner.locator("#class-question [data-field=reveal]")).to_contain_text(line)
        assert errors == []
    finally:
        learner.context.close()
        teacher.context.close()
        httpx.delete(f"{server}/api/classes/{started['code']}", headers={"X-Class-Secret": started["secret"]})


def test_exports_carry_the_measure_in_their_view_and_their_name(page, server, api):
    page.goto(f"{server}/?layer=1&head=6&token=2&measure=norm")
    wait_view(page, "heatmap", 1, 6, 2)
    with page.expect_download() as download:
        save(page, "export-json")
    assert download.value.suggested_filename == "attention-norm-block1-head6.json"
    exported = json.loads(download.value.path().read_text())
    assert exported["view"]["measure"] == "norm" and exported["view"]["measure_name"] == "norm-weighted attention"
    np.testing.assert_allclose(exported["matrix"], served(api, run_id(page), "norm", 1)[6], atol=1e-6)
    page.select_option("#measure", "weights")
    wait_until(page, "document.getElementById('heatmap').heatmap.measure.key === 'weights'")
    with page.expect_download() as download:
        save(page, "export-csv")
    assert download.value.suggested_filename == "attention-weights-block1-head6.csv"
    assert "each cell: attention weight" in download.value.path().read_text().splitlines()[1]


SHARES = "share of the kept tokens' norm-weighted attention"
SHARE_RANGE = "0 to 1, a share of the row's total over the kept tokens; each row sums to 1"
SINK_SHARE = "the hidden special tokens' share of the row's total before renormalising, 0 to 1"


def test_hidden_and_renormalised_every_word_says_shares_and_the_sink_is_one(page, server, api):
    """Issue #44 item 9: norm-weighted cells rescaled over the kept tokens are shares, 0 to 1, not lengths;
    every label says so and the sink column (heatmap, attends, exports) is the hidden tokens' share of the
    row's total before the rescaling. Checked against NumPy on the API's float32 norms."""
    page.goto(f"{server}/?text={TEXT.replace(' ', '+')}&layer=3&head=7&token=9&measure=norm&sinks=renormalise")
    wait_view(page, "heatmap", 3, 7, 9)
    wait_until(page, "document.getElementById('heatmap').getAttribute('aria-busy') === 'false'")
    tokens = api.post("/api/analyze", json={"text": TEXT}).json()["tokens"]
    hidden = np.array([t["added"] for t in tokens])
    norms = served(api, run_id(page), "norm", 3)[7]
    kept = norms[:, ~hidden].sum(1)
    shares = np.where(hidden[None, :], np.nan, norms / kept[:, None])
    sink = norms[:, hidden].sum(1) / norms.sum(1)
    assert np.abs(norms[:, hidden].sum(1) - sink).max() > 0.1  # the sink's length is another number, in another unit

    shown = heatmap_state(page)
    match = re.fullmatch(r"share of ‖α·f\(x\)‖\[9,(\d+)\] = (\d\.\d{4}), “.*” → “.*”", shown["readout"])
    assert match, shown["readout"]
    col = int(match.group(1))
    assert col == int(np.nanargmax(shares[9])) and float(match.group(2)) == pytest.approx(shares[9, col], abs=5e-5)
    assert shown["title"].startswith("norm-weighted, renormalised block 3, head 7 · ")
    assert f"each the {SHARES} of a query and a key ({SHARE_RANGE})" in shown["aria"]
    colour_bar = page.locator("#heatmap .hm-colorbar").get_attribute("title")
    assert colour_bar == f"{SHARES}: {SHARE_RANGE}"
    assert page.locator("#heatmap .hm-sink").get_attribute("title") == f"sink, per row: {SINK_SHARE} ([CLS]+[SEP])"
    page.mouse.move(*cell_centre(page, 9, 4))
    expect(page.locator("#heatmap .hm-tooltip")).to_contain_text(f"share of ‖α·f(x)‖[9,4] = {shares[9, 4]:.4f}")
    drawn = np.array([float(v) for v in page.locator("#heatmap").get_attribute("data-sink").split(",")])
    np.testing.assert_allclose(drawn, sink, atol=1e-6)  # float32 sums of 12 values below 1
    words = " ".join([shown["aria"], colour_bar, page.locator("#heatmap").inner_text()])
    assert "length" not in words and "0 and up" not in words

    attends = page.locator("#attends")
    assert attends.locator(".caption").inner_text().endswith(f"show the {SHARES} on each token.")
    hint = attends.locator("[data-field=sink-hint]").inner_text()
    assert f"each value is a {SHARES}, and the sink {SINK_SHARE}" in hint
    assert float(attends.locator("[data-field=sink] .attend-weight").get_attribute("data-value")) == pytest.approx(
        sink[9], abs=1e-6
    )
    assert attends.locator("[data-field=sink]").get_attribute("title") == f"sink: {SINK_SHARE}"

    with page.expect_download() as download:
        save(page, "export-json")
    exported = json.loads(download.value.path().read_text())
    assert exported["view"]["measure_name"] == SHARES and exported["view"]["values"] == SHARE_RANGE
    assert exported["view"]["name"].startswith("norm-weighted, renormalised block 3, head 7")
    matrix = np.array(exported["matrix"], dtype=np.float64)  # null (a hidden column) becomes NaN
    np.testing.assert_allclose(matrix, shares, atol=1e-6)
    np.testing.assert_allclose(np.nansum(matrix, 1), 1, atol=1e-5)
    np.testing.assert_allclose(exported["sink"], sink, atol=1e-6)
    assert exported["sink_meaning"] == SINK_SHARE
    with page.expect_download() as download:
        save(page, "export-csv")
    lines = list(csv.reader(io.StringIO(download.value.path().read_text())))
    assert f"each cell: {SHARES} ({SHARE_RANGE})" in lines[1][0]
    assert lines[2][-1] == f"sink: {SINK_SHARE}"
    table = np.array([[float(v) if v else np.nan for v in row[1:]] for row in lines[3:]])
    np.testing.assert_allclose(table[:, :-1], shares, atol=1e-6)
    np.testing.assert_allclose(table[:, -1], sink, atol=1e-6)  # the sink column in the cells' unit
    assert np.nanmax(table) <= 1 + 1e-6


def test_a_per_block_measures_export_names_no_head(page, server, api):
    """ALTI is one picture per block: its export says no head (it said "head": 0), and why."""
    page.goto(f"{server}/?layer=2&head=0&token=3&measure=alti")
    wait_view(page, "heatmap", 2, 0, 3)
    wait_until(page, "document.getElementById('heatmap').getAttribute('aria-busy') === 'false'")
    with page.expect_download() as download:
        save(page, "export-json")
    exported = json.loads(download.value.path().read_text())
    assert exported["view"]["head"] is None and exported["view"]["heads"] is None
    why = "ALTI contribution has one picture per block: it measures the block as a whole, not a head"
    assert exported["view"]["no_head"] == why
    np.testing.assert_allclose(exported["matrix"], served(api, run_id(page), "alti", 2)[0], atol=1e-6)
    with page.expect_download() as download:
        save(page, "export-csv")
    about = next(csv.reader(io.StringIO(download.value.path().read_text().splitlines()[1])))[0]
    assert f"view: ALTI · block 2 · bidirectional mask ({why}); each cell: ALTI contribution" in about
    assert "head" not in about.replace(why, "")


# Every word a page says now, as the browser has it: the text of every element (hidden ones too) outside
# scripts and styles, option texts included, every spoken attribute, and what the inputs hold.
SAID = """() => {
  const found = [];
  const walker = document.createTreeWalker(document.documentElement, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent.closest('script, style, template') && node.textContent.trim())
      found.push([parent.id || parent.className || parent.tagName, node.textContent]);
  }
  const spoken = ['title', 'aria-label', 'placeholder', 'alt', 'aria-description', 'aria-valuetext'];
  for (const element of document.querySelectorAll(spoken.map((name) => `[${name}]`).join(',')))
    for (const name of spoken.filter((name) => element.hasAttribute(name)))
      found.push([`${element.id || element.tagName}[${name}]`, element.getAttribute(name)]);
  for (const input of document.querySelectorAll('input:not([type=checkbox]):not([type=radio]), textarea'))
    found.push([`${input.id}.value`, input.value]);
  return found;
}"""


def test_no_word_on_the_page_is_a_repr_or_a_placeholder(page, server):
    """Issue #44 item 10, in the browser: the lab with its Measure help open, each panel and experiment, the
    presentation mode's Options… and More…, the class panel, and the atlas page, under the renormalised
    norm-weighted measure, whose words the scripts fill in."""
    said = []
    page.goto(f"{server}/?token=3&layer=2&head=5&measure=norm&sinks=renormalise")
    wait_view(page, "heatmap", 2, 5, 3)
    wait_view(page, "attends", 2, 5, 3)
    page.click("#measure-help")
    expect(page.locator("#measure-about")).to_be_visible()
    said += page.evaluate(SAID)
    for tab in page.locator("#panel-tabs [role=tab]:not([disabled])").all():
        name = tab.get_attribute("data-panel")
        tab.click()
        if name == "lessons":
            for lesson in page.locator("#lesson-tabs [role=tab]:not([disabled])").all():
                key = lesson.get_attribute("id").removeprefix("lesson-tab-")
                lesson.click()
                wait_until(page, f"document.getElementById('lesson-panel').dataset.view?.startsWith('{key}:')")
                said += page.evaluate(SAID)
        else:
            drawn = f"document.querySelector('#panel-{name} [data-view]')?.getAttribute('aria-busy') === 'false'"
            wait_until(page, drawn)
            said += page.evaluate(SAID)
    page.click("#present")
    page.click("#options-toggle")
    expect(page.locator("#prompt-options")).to_be_visible()
    said += page.evaluate(SAID)
    page.click("#options-toggle")  # open, the options cover More…
    page.click("#toolbar-more-toggle")
    expect(page.locator("#toolbar-more")).to_be_visible()
    said += page.evaluate(SAID)
    page.click("#class-start")
    expect(page.locator("#class-panel")).to_be_visible()
    said += page.evaluate(SAID)
    assert len(said) > 500 and any("share of the kept tokens'" in what for _, what in said)
    page.goto(f"{server}/atlas")
    wait_until(page, "document.readyState === 'complete' && document.getElementById('atlas-run')")
    atlas = page.evaluate(SAID)
    assert any("atlas" in what.lower() for _, what in atlas)
    assert leaked(said + atlas) == []


# --- views that cannot pair the wrong tokens -----------------------------------------------------------------------


def columns(page) -> tuple[list, list]:
    """The attends view's two columns, line by line: (index, text) of each query and of each key listed."""
    return page.evaluate(
        """() => {
             const entry = (li) => [Number(li.dataset.index), (li.querySelector('.attend-token') ?? li).textContent];
             return ['.attend-queries > li', '.attend-keys > li[data-index]']
               .map((rows) => [...document.querySelectorAll(`#attends ${rows}`)].map(entry));
           }"""
    )


@pytest.mark.parametrize("sinks", ["hide", "renormalise"])
def test_the_attends_columns_pair_the_same_tokens_under_every_filter(page, server, api, sinks):
    tokens = api.post("/api/analyze", json={"text": TEXT, "text_pair": PAIR}).json()["tokens"]
    in_a = next(t["index"] for t in tokens if t["segment"] == "A" and not t["added"] and t["text"] == "rates")
    in_b = next(t["index"] for t in tokens if t["segment"] == "B" and not t["added"] and t["text"] == "river")
    page.goto(f"{server}/?text={TEXT.replace(' ', '+')}&pair={PAIR.replace(' ', '+')}&layer=2&head=1&token={in_a}")
    wait_view(page, "attends", 2, 1, in_a)
    page.select_option("#sinks", sinks)
    for segments in ["all", "AA", "AB", "BA", "BB"]:
        token = in_b if segments[0] == "B" else in_a
        page.select_option("#segments", segments)
        if page.locator(f'#tokens .token[data-index="{token}"]').get_attribute("aria-selected") != "true":
            page.locator(f'#tokens .token[data-index="{token}"]').click()
        wait_until(page, f"document.getElementById('attends').dataset.view?.endsWith(':{token}')")
        wait_until(page, "document.getElementById('attends').getAttribute('aria-busy') === 'false'")
        left, right = columns(page)
        assert [text for _, text in left] == [text for _, text in right], (segments, left, right)  # line by line
        assert left == right and [index for index, _ in left] == list(range(len(tokens))), segments
        hidden = set(page.locator("#attends .attend-hidden").evaluate_all("l => l.map((x) => Number(x.dataset.index))"))
        expected = {t["index"] for t in tokens if t["added"]}
        if segments != "all":
            expected |= {t["index"] for t in tokens if t["segment"] != segments[1]}
        assert hidden == expected, segments
        if segments == "AB":
            screenshot(page, f"attends-{sinks}-AB", page.locator(".attends-panel"))


def test_renormalised_and_filtered_the_hint_says_what_the_shown_values_sum_to(page, server, api):
    tokens = api.post("/api/analyze", json={"text": TEXT, "text_pair": PAIR}).json()["tokens"]
    token = next(t["index"] for t in tokens if t["text"] == "rates")
    texts = f"text={TEXT.replace(' ', '+')}&pair={PAIR.replace(' ', '+')}"
    page.goto(f"{server}/?{texts}&layer=2&head=1&token={token}&sinks=renormalise&segments=AB")
    wait_view(page, "attends", 2, 1, token)
    run = run_id(page)
    row = served(api, run, "weights", 2)[1, token]
    added = np.array([t["added"] for t in tokens])
    in_b = np.array([t["segment"] == "B" for t in tokens])
    renormalised = row / row[~added].sum()
    expected = renormalised[~added & in_b].sum()
    hint = page.locator("#attends [data-field=sink-hint]")
    assert float(hint.get_attribute("data-sum")) == pytest.approx(expected, abs=1e-5)
    assert f"the values shown sum to {expected:.4f}" in hint.inner_text() and expected < 0.9
    shown = page.locator("#attends .attend-row").evaluate_all("rows => rows.map((r) => Number(r.dataset.weight))")
    assert sum(shown) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (360, 740)], ids=["1280x720", "360x740"])
def test_the_attends_bars_share_one_baseline(browser, server, width, height):
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    try:
        page.goto(f"{server}/?layer=2&head=5&token=3&sinks=hide")
        wait_view(page, "attends", 2, 5, 3)
        page.locator("#attends").scroll_into_view_if_needed()
        bars = page.locator("#attends .attend-keys .bars").evaluate_all(
            "l => l.map((s) => [s.getBoundingClientRect().left, s.firstElementChild.getBoundingClientRect().width])"
        )
        lefts = [left for left, _ in bars]
        assert len(bars) >= 13 and max(lefts) - min(lefts) < 0.5, lefts  # every key's bar and the sink's
        assert max(width for _, width in bars) >= 80, bars  # the longest bar is a real length, on a phone too
        overlap = page.evaluate(
            """() => {
                 const [a, b] = ['.hm-sink-label', '[data-zoom="Reset"]']
                   .map((part) => document.querySelector(`#heatmap ${part}`).getBoundingClientRect());
                 return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
               }"""
        )
        assert not overlap  # the sink column's label clear of Reset
        screenshot(page, f"attends-baseline-{width}", page.locator(".attends-panel"))
    finally:
        page.context.close()


@pytest.mark.parametrize(
    ("text", "count"),
    [(" ".join(["the river bank."] * 100 + ["the old bank"] * 15), 447), (LONG, 512)],
    ids=["447 tokens", "512 tokens"],
)
def test_sampled_axis_labels_include_the_selected_row_and_column(page, server, api, text, count):
    assert len(api.post("/api/analyze", json={"text": text}).json()["tokens"]) == count
    page.goto(f"{server}/?text={text.replace(' ', '+')}&layer=0&head=0&token=301")
    wait_view(page, "heatmap", 0, 0, 301)
    labels = page.locator("#heatmap .hm-ylabels span")
    assert 10 <= labels.count() < count  # sampled
    rows = labels.evaluate_all("s => s.map((x) => Number(x.dataset.index))")
    cols = page.locator("#heatmap .hm-xlabels span").evaluate_all("s => s.map((x) => Number(x.dataset.index))")
    readout_col = int(re.match(r"A\[301,(\d+)\]", page.locator("#heatmap-readout").inner_text()).group(1))
    assert 301 in rows and readout_col in cols
    tops = page.locator("#heatmap .hm-ylabels span").evaluate_all("s => s.map((x) => x.getBoundingClientRect().top)")
    assert all(b - a >= 10 for a, b in zip(tops, tops[1:], strict=False))  # the pinned labels overlap no other
    page.locator("#heatmap .hm-plot").focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    cursor = page.locator("#heatmap").get_attribute("data-cursor")
    row, col = map(int, cursor.split(","))
    assert col in page.locator("#heatmap .hm-xlabels span").evaluate_all("s => s.map((x) => Number(x.dataset.index))")


def test_a_long_input_says_where_it_was_cut(page, server, api):
    page.goto(f"{server}/")
    run_id(page)
    page.fill("#prompt", LONG)
    page.press("#prompt", "Enter")
    wait_until(page, "document.querySelectorAll('#tokens .token').length === 512")
    tokens = api.post("/api/analyze", json={"text": LONG}).json()["tokens"]
    last = [t for t in tokens if not t["added"]][-1]
    notice = page.locator("#notice")
    expect(notice).to_be_visible()
    expected = f"stops after “{last['label']}” (token {last['index']}), at character {last['end']:,} of {len(LONG):,}"
    assert expected in notice.inner_text()
    assert notice.evaluate("n => n.scrollWidth <= n.clientWidth + 1")  # said whole


# --- hints, menus, focus, phones -------------------------------------------------------------------------------------


def test_the_difference_hint_follows_the_view(page, server):
    page.goto(f"{server}/?layer=1&head=3&panel=lessons&lesson=difference")
    hint = page.locator("#difference-hint")
    expect(hint).to_contain_text("now block 1, head 3")
    page.select_option("#head", "7")
    expect(hint).to_contain_text("now block 1, head 7")
    page.select_option("#measure", "norm")
    expect(hint).to_contain_text("norm-weighted attention")
    expect(hint).to_contain_text("now norm-weighted block 1, head 7")


def test_save_closes_with_escape(page, server):
    page.goto(f"{server}/?layer=1&head=2&token=3")
    wait_view(page, "heatmap", 1, 2, 3)
    page.click("#export-menu")
    expect(page.locator("#export-png")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#export-png")).to_be_hidden()
    assert page.evaluate("document.activeElement.id") == "export-menu"
    assert page.locator("#tokens .token[aria-selected=true]").count() == 1  # Esc closed the menu, nothing more


def test_the_heatmaps_focus_ring_leaves_the_row_labels_clear(page, server):
    page.goto(f"{server}/?layer=1&head=2&token=3")
    wait_view(page, "heatmap", 1, 2, 3)
    page.locator("#heatmap .hm-plot").focus()
    page.keyboard.press("ArrowDown")  # from the keyboard: the focus ring shows
    ring = page.evaluate(
        """() => {
             const plot = document.querySelector('#heatmap .hm-plot'), style = getComputedStyle(plot);
             const reach = parseFloat(style.outlineWidth) + parseFloat(style.outlineOffset);
             const visible = plot.matches(':focus-visible') && style.outlineStyle !== 'none';
             return {visible, left: plot.getBoundingClientRect().left - reach};
           }"""
    )
    assert ring["visible"]
    rights = page.locator("#heatmap .hm-ylabels span").evaluate_all(
        "l => l.map((x) => x.getBoundingClientRect().right)"
    )
    assert max(rights) < ring["left"], (max(rights), ring)
    screenshot(page, "heatmap-focus-ring", page.locator(".heatmap-column"))


def test_on_a_phone_a_tapped_cell_keeps_its_tooltip_on_screen_and_no_preview_is_left(browser, server):
    context = browser.new_context(viewport={"width": 360, "height": 740}, has_touch=True, is_mobile=True)
    page = context.new_page()
    try:
        page.goto(f"{server}/?layer=2&head=5&token=3")
        wait_view(page, "heatmap", 2, 5, 3)
        page.locator('#tokens .token[data-index="7"]').tap()
        wait_view(page, "attends", 2, 5, 7)
        assert "preview" not in page.locator("#attends .caption").inner_text()
        page.locator("#heatmap .hm-canvas").scroll_into_view_if_needed()
        for row, col in [(4, 14), (12, 13), (1, 0)]:
            page.touchscreen.tap(*cell_centre(page, row, col))
            tooltip = page.locator("#heatmap .hm-tooltip")
            expect(tooltip).to_be_visible()
            box = tooltip.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 360, (row, col, box)
            assert "A[" in tooltip.inner_text()
        wait_view(page, "attends", 2, 5, 1)
        assert "preview" not in page.locator("#attends .caption").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=ARTIFACTS / "phone-360-tooltip.png")
    finally:
        context.close()
