"""The page with an encoder-decoder (tiny random T5, BART and Marian served beside a BERT): the source and the target
labelled, cross-attention opened and a target word clicked, and the numbers the attends view shows are transformers'
eager `cross_attentions` for that row, computed here from the folder. The encoder's and the decoder's
self-attention label their rows and columns with the right tokens; the exports link to the run's; the target the
model writes is written; the heatmap saved as SVG and PNG names its kind, block and head, the source and the target
and every token; the every-head grid saved as SVG and PNG names its kind, measure and shape and keeps each head's
shape; the tour walks the page with the run's counts; ALTI says the run's sentence why it is not drawn; a class is
asked which source token a target token reads most, and the alignment plan says how to serve its model. Nothing cut
or off-screen at a projector's 1024×768 and a 390 px phone; axe-core finds no violation of any impact in each kind's
views and the every-head grid; no error in the page."""

import math
import re
import zlib
from pathlib import Path
from xml.etree import ElementTree

import httpx
import pytest
import torch
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.browser import audit
from tests.browser.conftest import ARTIFACTS, screenshot, wait_until
from tests.conftest import LabProcess
from tests.families import build
from tests.float32 import tolerance

SOURCE = "The cat sat on the mat."
TARGET = "A quick brown fox jumps over the lazy dog!"
FAMILIES = ["t5", "bart", "marian"]
CLICKED = 3  # the target token clicked: its row is the step that chooses target token 4
DRAWN = "document.body.dataset.run && document.getElementById('attends').getAttribute('aria-busy') === 'false'"
RUN = "() => fetch(`/api/encoder-decoder/${document.body.dataset.run}/export?format=json`).then((r) => r.json())"
MAP = "document.getElementById('heatmap').pairMap.shown"
KEYS = "[...document.querySelectorAll('#attends .attend-keys > li')]"
STAGE = "header.topbar, main.stage"
BLANK = "Hidden while the class votes: the numbers come back at Reveal."
SVG = "{http://www.w3.org/2000/svg}"
LINES = (
    "[...document.querySelectorAll('#attends .attend-lines line')]"
    ".map((l) => ['y1', 'y2', 'stroke-width'].map((a) => Number(l.getAttribute(a))))"
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {family: build(family, tmp_path_factory.mktemp(family) / family) for family in ["bert", *FAMILIES]}


@pytest.fixture(scope="module")
def lab(folders):
    process = LabProcess(
        folders["bert"].parent,
        env={
            "ATTENTION_LAB_MODEL_PATH": str(folders["bert"]),
            "ATTENTION_LAB_MODELS": ",".join(str(folders[family]) for family in FAMILIES),
        },
    )
    process.start()
    yield process.url
    process.stop()


def eager(folder, source: str, target_ids: list[int]):
    """transformers' own reading of the folder, eager attention: the independent computation."""
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        out = model(
            input_ids=tokenizer(source, return_tensors="pt")["input_ids"],
            decoder_input_ids=torch.tensor([target_ids]),
            output_attentions=True,
        )
    config = model.config
    blocks = getattr(config, "encoder_layers", None) or config.num_layers
    blocks += getattr(config, "decoder_layers", None) or config.num_decoder_layers
    widest = max(config.d_model, getattr(config, "d_ff", 0) or config.encoder_ffn_dim)
    return out, tolerance(blocks * widest)


def open_page(browser, lab, model: str, size, query: str):
    # bypass_csp lets axe-core's script in; the page's own Content-Security-Policy is unchanged.
    context = browser.new_context(
        viewport={"width": size[0], "height": size[1]}, accept_downloads=True, bypass_csp=True
    )
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and page.errors.append(message.text))
    page.goto(f"{lab}/?model={model}&{query}")
    wait_until(page, f"{DRAWN} && document.querySelector('#attends .attend-keys')")
    return context, page


def violations(page) -> list[str]:
    """axe-core's violations on the page as it is, of any impact."""
    found = Axe().run(page).response["violations"]
    return [f"{v['id']} ({v['impact']}): {v['help']} at {[node['target'] for node in v['nodes']]}" for v in found]


def shown_row(page) -> list[tuple[str, str, float]]:
    """The attends view's rows: each key's label, its segment and the number printed beside its bar."""
    return page.evaluate(
        f"""() => {KEYS}.map((li) => [
            li.querySelector('.attend-token').textContent, li.dataset.segment,
            Number(li.querySelector('.attend-weight').textContent),
        ])"""
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_a_clicked_target_word_reads_the_source_as_transformers_cross_attention(browser, lab, folders, family):
    context, page = open_page(browser, lab, family, (1280, 800), f"text={SOURCE}&target={TARGET}&layer=1&head=2")
    expect(page.locator("label[for=prompt]")).to_have_text("Source")
    expect(page.locator("#prompt-target")).to_have_value(TARGET)
    expect(page.locator("#kind")).to_have_value("cross")
    sides = page.locator("#tokens .pair-side-name")
    expect(sides).to_have_text(["Source", "Target"])
    page.locator(f'#tokens .pair-chips[data-side="target"] .token[data-index="{CLICKED}"]').click()
    wait_until(page, f"document.querySelector('#attends .attend-queries li.selected')?.dataset.index === '{CLICKED}'")
    run = page.evaluate(RUN)
    out, bound = eager(folders[family], SOURCE, [token["id"] for token in run["target"]["tokens"]])
    expected = out.cross_attentions[1][0, 2, CLICKED].tolist()
    shown = shown_row(page)
    assert [label for label, _, _ in shown] == [token["label"] for token in run["source"]["tokens"]]
    assert {segment for _, segment, _ in shown} == {"source"}
    assert len(shown) == len(expected)
    for (_, _, number), weight in zip(shown, expected, strict=True):
        assert abs(number - weight) <= 5e-5 + bound  # printed to 4 decimals
    exact = page.evaluate(f"() => {KEYS}.map((li) => Number(li.dataset.weight))")
    assert max(abs(a - b) for a, b in zip(exact, expected, strict=True)) <= bound
    # A line from the clicked row to every source token, as wide as its share of the largest weight.
    lines = page.evaluate(LINES)
    assert [(y1, y2) for y1, y2, _ in lines] == [(CLICKED + 0.5, key + 0.5) for key in range(len(exact))]
    assert [width for _, _, width in lines] == pytest.approx([0.5 + 5 * w / max(exact) for w in exact], abs=1e-5)
    # The heatmap is target rows × source columns, the clicked row outlined.
    heatmap = page.locator("#heatmap")
    expect(heatmap).to_have_attribute("data-selected-row", str(CLICKED))
    title = "cross-attention, block 1, head 2 · Target rows × Source columns"
    expect(page.locator("#heatmap .hm-title")).to_contain_text(title)
    shape = [len(run["target"]["tokens"]), len(run["source"]["tokens"])]
    assert page.evaluate(f"() => [{MAP}.rows, {MAP}.columns]") == shape
    # → moves to the next target token's row, as it moves along the tokens on a one-text page.
    page.keyboard.press("ArrowRight")
    expect(heatmap).to_have_attribute("data-selected-row", str(CLICKED + 1))
    context.close()
    assert page.errors == []


def test_a_source_word_clicked_in_the_last_decoder_block_opens_an_encoder_block_it_has(browser, lab):
    """Marian has 2 encoder blocks and 3 decoder blocks: from cross-attention in block 2, a source word's row is
    the encoder's self-attention, in its last block."""
    context, page = open_page(browser, lab, "marian", (1280, 800), f"text={SOURCE}&target={TARGET}&layer=2")
    expect(page.locator("#layer")).to_have_value("2")
    page.locator('#tokens .pair-chips[data-side="source"] .token[data-index="1"]').click()
    expect(page.locator("#kind")).to_have_value("encoder")
    expect(page.locator("#layer")).to_have_value("1")
    expect(page.locator("#heatmap .hm-title")).to_contain_text("encoder self-attention, block 1")
    expect(page.locator("#heatmap")).to_have_attribute("data-selected-row", "1")
    context.close()
    assert page.errors == []


# The projector sizes and the phone the test above does not open (it reads 1024×768 and 390×844 whole).
OTHER_SIZES = [(1280, 720), (1280, 800), (1366, 768), (1920, 1080), (360, 740)]


def test_each_kind_and_every_head_fit_the_other_projectors_and_the_small_phone(browser, lab):
    """Every kind of attention and the every-head grid at the remaining projector sizes and the 360 px phone:
    nothing with a number, token or control cut, ellipsised or off-screen (a phone's page may scroll down)."""
    found = []
    for width, height in OTHER_SIZES:
        context, page = open_page(browser, lab, "marian", (width, height), f"text={SOURCE}&target={TARGET}")
        for kind, title in [
            ("encoder", "encoder self-attention"),
            ("decoder", "decoder self-attention"),
            ("cross", "cross"),
        ]:
            page.select_option("#kind", kind)
            expect(page.locator("#heatmap .hm-title")).to_contain_text(title)
            wait_until(page, DRAWN)
            found += [
                f"{width}×{height} {kind}: {p}" for p in audit.problems(page, 0, 0, STAGE, page_scrolls=width < 900)
            ]
        page.locator("#panel-menu").click() if page.locator("#panel-menu").is_visible() else None
        page.locator("#panel-tab-grid").click()
        wait_until(page, "document.querySelectorAll('#grid .grid-cell').length === 12")
        found += [f"{width}×{height} grid: {p}" for p in audit.problems(page, 0, 0, STAGE, page_scrolls=width < 900)]
        screenshot(page, f"encoder-decoder-grid-{width}x{height}")
        context.close()
        assert page.errors == []
    assert found == [], "\n".join(found)


def test_each_kind_labels_its_rows_and_columns_and_the_views_fit(browser, lab, folders):
    found = []
    for size in [(1024, 768), (390, 844)]:
        context, page = open_page(browser, lab, "marian", size, f"text={SOURCE}&target={TARGET}")
        run = page.evaluate(RUN)
        expect(page.locator("#model-name")).to_contain_text("2 encoder + 3 decoder blocks × 4 heads")
        source = [token["label"] for token in run["source"]["tokens"]]
        target = [token["label"] for token in run["target"]["tokens"]]
        kinds = [("encoder", source, source), ("decoder", target, target), ("cross", target, source)]
        for kind, rows, columns in kinds:
            page.select_option("#kind", kind)
            wait_until(page, f"{MAP}.rows === {len(rows)} && {MAP}.columns === {len(columns)} && {DRAWN}")
            assert ("kind=" in page.url) == (kind != "cross") and (kind == "cross" or f"kind={kind}" in page.url)
            assert page.evaluate(f"() => {MAP}.rowLabels") == rows
            assert page.evaluate(f"() => {MAP}.columnLabels") == columns
            keys = [label for label, _, _ in shown_row(page)]
            selected = int(page.locator("#attends .attend-queries li.selected").get_attribute("data-index"))
            # The decoder reads causally: a target token's row lists itself and the tokens before it.
            assert keys == (columns[: selected + 1] if kind == "decoder" else columns)
            found += [
                f"{size[0]} {kind}: {problem}"
                for problem in audit.problems(page, 0, 0, STAGE, page_scrolls=size[0] < 900)
                + (violations(page) if size[0] > 900 else [])  # the phone's page is checked once, below
            ]
            screenshot(page, f"encoder-decoder-{kind}-{size[0]}")
        # Every head of the kind, as many blocks as its stack has (Marian here: 3 decoder blocks × 4 heads).
        page.locator("#panel-menu").click() if page.locator("#panel-menu").is_visible() else None
        page.locator("#panel-tab-grid").click()
        wait_until(page, "document.querySelectorAll('#grid .grid-cell').length === 12")
        page.locator('#grid .grid-cell[data-layer="2"][data-head="1"]').click()
        expect(page.locator("#heatmap .hm-title")).to_contain_text("cross-attention, block 2, head 1")
        found += [
            f"{size[0]} grid: {problem}"
            for problem in audit.problems(page, 0, 0, STAGE, page_scrolls=size[0] < 900) + violations(page)
        ]
        screenshot(page, f"encoder-decoder-grid-{size[0]}")
        page.locator("#export-menu").click()
        href = page.locator("#export-pair-csv").get_attribute("href")
        assert href == f"/api/encoder-decoder/{run['run_id']}/export?format=csv"
        if size[0] > 900:
            saved_pictures(page, run, source, target)
            saved_grid(page, "marian", "cross", 3, (len(target), len(source)))
            page.select_option("#kind", "encoder")
            wait_until(page, "document.querySelectorAll('#grid .grid-cell').length === 8")
            saved_grid(page, "marian", "encoder", 2, (len(source), len(source)))
        context.close()
        assert page.errors == []
    assert found == [], "\n".join(found)


def saved_pictures(page, run, source: list[str], target: list[str]) -> None:
    """The heatmap saved as SVG and PNG (the Save… menu open), named for the kind, measure, block and head shown
    (cross-attention, block 2, head 1): the SVG's title, the source and target texts, target rows and source
    columns, each token's label; the PNG a PNG as wide as the SVG says."""
    with page.expect_download() as svg_download:
        page.locator("#export-pair-svg").click()
    assert svg_download.value.suggested_filename == "cross-attention-weights-block2-head1.svg"
    svg = ElementTree.parse(svg_download.value.path()).getroot()
    texts = lambda kind: [node.text for node in svg.iter(f"{SVG}text") if node.get("class") == kind]  # noqa: E731
    assert texts("title") == ["cross-attention, block 2, head 1 · Target rows × Source columns"]
    assert texts("about")[0] == f"Source: “{run['source']['text']}”"
    assert texts("about")[1].startswith(f"Target: “{run['target']['text']}”")
    assert texts("row") == target and texts("column") == source  # a short pair: every label
    assert texts("rows") == ["Target tokens: looking (queries)"]
    assert texts("columns") == ["Source tokens: looked at (keys)"]
    page.locator("#export-menu").click()
    with page.expect_download() as png_download:
        page.locator("#export-pair-png").click()
    assert png_download.value.suggested_filename == "cross-attention-weights-block2-head1.png"
    png_download.value.save_as(ARTIFACTS / "encoder-decoder-saved-heatmap.png")  # to look at
    png = Path(png_download.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert [int.from_bytes(png[at : at + 4], "big") for at in (16, 20)] == [
        int(svg.get("width")),
        int(svg.get("height")),
    ]


def test_the_tour_walks_the_encoder_decoder_page_with_the_runs_counts(browser, lab):
    """The tour on T5's page, walked with the keyboard: each step outlines its view, shows its kind of attention and
    names the run's real counts (source and target tokens, 2 encoder and 2 decoder blocks, 4 heads); nothing in its
    text is a value the page failed to fill, and nothing on the stage is cut at a projector's 1024×768."""
    context, page = open_page(browser, lab, "t5", (1024, 768), f"text={SOURCE}&target={TARGET}")
    run = page.evaluate(RUN)
    source, target = len(run["source"]["tokens"]), len(run["target"]["tokens"])
    word = next(token for token in run["target"]["tokens"] if not token["special"])
    steps = [  # the view outlined, the kind shown, the counts named
        ("tokens", "cross", [source, target]),
        ("heatmap", "encoder", [2, 4, f"{source}×{source}"]),
        ("heatmap", "decoder", [2, 4, f"{target}×{target}"]),
        ("heatmap", "cross", [2, 4, target, source]),
        ("attends", "cross", [source, f"“{word['label']}” (target token {word['index']})"]),
        ("grid", "cross", [2, 4, 4 * (2 + 2 * 2)]),
    ]
    found = []
    page.locator("#tour-start").press("Enter")
    for number, (view, kind, counts) in enumerate(steps, start=1):
        expect(page.locator("#tour-counter")).to_have_text(f"Step {number} of {len(steps)}")
        expect(page.locator(".tour-focus")).to_have_attribute("data-tour-target", view)
        expect(page.locator("#kind")).to_have_value(kind)
        said = f"{page.locator('#tour-title').inner_text()}\n{page.locator('#tour-text').inner_text()}\n"
        said += page.locator("#tour-shape").inner_text()
        for bad in ["undefined", "NaN", "null", "object at 0x", "[object"]:
            assert bad not in said, f"step {number}: {said}"
        for named in counts:  # a count as a whole, not a digit of another number
            whole = rf"(?<![\d×]){re.escape(str(named))}(?![\d×])"
            assert re.search(whole, said), f"step {number} names no {named}: {said}"
        # The box shows its whole text, without a scroll of its own (a box squeezed into the closed panels' bar did).
        whole = "(box) => box.scrollHeight <= box.clientHeight + 1 && box.getBoundingClientRect().bottom <= innerHeight"
        assert page.locator("#tour").evaluate(whole), f"step {number}: the tour's box cuts its text"
        found += [f"step {number}: {problem}" for problem in audit.problems(page, 0, 0, STAGE)]
        screenshot(page, f"encoder-decoder-tour-{number}-1024")
        page.locator("#tour-next").press("Enter")
    # The attends step selected the first target word; the grid step opened the grid of cross-attention.
    expect(page.locator("#heatmap")).to_have_attribute("data-selected-row", str(word["index"]))
    expect(page.locator("#grid .grid-cell")).to_have_count(8)
    expect(page.locator("#tour")).to_be_hidden()
    # A link to the attends step opens it before its run: the run that follows fills it in.
    page.goto(f"{page.url}&tour=5")
    wait_until(page, DRAWN)
    expect(page.locator("#tour-text")).to_contain_text(f"“{word['label']}” (target token {word['index']})")
    expect(page.locator("#attends .attend-queries li.selected")).to_have_attribute("data-index", str(word["index"]))
    context.close()
    assert page.errors == []
    assert found == [], "\n".join(found)


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height, once its chunks check out and its pixels inflate to exactly that size (8-bit RGB
    or RGBA, as a canvas saves it)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        assert zlib.crc32(kind + body) == int.from_bytes(data[at + 8 + length : at + 12 + length], "big")
        chunks[kind] = chunks.get(kind, b"") + body
        at += 12 + length
    width, height = int.from_bytes(chunks[b"IHDR"][:4], "big"), int.from_bytes(chunks[b"IHDR"][4:8], "big")
    depth, colour = chunks[b"IHDR"][8], chunks[b"IHDR"][9]
    assert depth == 8 and colour in (2, 6)
    assert len(zlib.decompress(chunks[b"IDAT"])) == height * (1 + width * (3 if colour == 2 else 4))
    return width, height


def saved_grid(page, model: str, kind: str, blocks: int, shape: tuple[int, int]) -> None:
    """The every-head grid saved as PNG and SVG (grid.js's sheet): the file named for the kind, the title naming the
    kind, the measure and the shape, every block and head labelled, and each head's picture as wide as its columns
    for its rows (square cells, as on the page); the PNG as large as the SVG."""
    name = {"encoder": "encoder self-attention", "cross": "cross-attention"}[kind]
    sides = {"encoder": ("source", "source"), "cross": ("target", "source")}[kind]
    rows, columns = shape
    with page.expect_download() as svg_download:
        page.locator("#export-grid-svg").click()
    stem = f"{kind}-attention-weights-grid"
    assert svg_download.value.suggested_filename == f"{stem}.svg"
    svg = ElementTree.parse(svg_download.value.path()).getroot()
    texts = [node.text for node in svg.iter(f"{SVG}text")]
    title = (
        f"Every head of {name} · attention weight · {blocks} blocks × 4 heads, "
        f"each {rows} {sides[0]} × {columns} {sides[1]} tokens · {model}"
    )
    assert svg.find(f"{SVG}title").text == title and title in texts
    assert {f"block {block}" for block in range(blocks)} | {f"head {head}" for head in range(4)} <= set(texts)
    heads = [node for node in svg.iter(f"{SVG}image") if node.get("class") == "head"]
    assert len(heads) == blocks * 4
    for head in heads:
        assert float(head.get("width")) / float(head.get("height")) == pytest.approx(columns / rows)
        assert head.get("href").startswith("data:image/png;base64,")
    with page.expect_download() as png_download:
        page.locator("#export-grid-png").click()
    assert png_download.value.suggested_filename == f"{stem}.png"
    png_download.value.save_as(ARTIFACTS / f"encoder-decoder-saved-grid-{kind}.png")  # to look at
    width, height = png_size(Path(png_download.value.path()).read_bytes())
    assert (width, height) == (int(svg.get("width")), int(svg.get("height")))
    # 72 px for a head's longer side, 6 between heads, 50 above the first block: the PNG's height follows the shape.
    assert height == math.ceil(50 + blocks * (72 * min(1, rows / columns) + 6))
    assert width >= 70 + 4 * (72 * min(1, columns / rows) + 6)


def test_an_empty_target_is_written_and_alti_says_why_not(browser, lab):
    context, page = open_page(browser, lab, "bart", (1024, 768), f"text={SOURCE}")
    expect(page.locator("#tokens .pair-side-name").nth(1)).to_have_text("Target (written by the model)")
    expect(page.locator("#prompt-target")).to_have_attribute("placeholder", "Empty: the model writes it")
    alti = page.locator('#measure option[value="alti"]')
    assert alti.get_attribute("disabled") is not None
    assert "cross-attention adds the source's rows" in alti.get_attribute("title")
    page.goto(page.url.replace("text=", "measure=alti&text="))
    wait_until(page, "!document.getElementById('error').hidden")
    expect(page.locator("#error")).to_contain_text("is not drawn for bart: ALTI follows each token's share")
    page.select_option("#measure", "norm")
    wait_until(page, "document.querySelector('#heatmap .hm-title')?.textContent.startsWith('norm-weighted')")
    context.close()
    assert page.errors == []


def test_a_class_is_asked_which_source_token_a_target_token_reads_on_the_page(browser, lab, folders):
    """The teacher's page on Marian asks the class about the clicked target token's cross-attention row; a phone
    that joined on the lab's default model follows to Marian's page, sees the source tokens as its choices with the
    views blank, votes, and reads the answer and the whole row at the reveal: transformers' numbers."""
    teacher_context, teacher = open_page(browser, lab, "marian", (1280, 800), f"text={SOURCE}&target={TARGET}&layer=1")
    teacher.locator(f'#tokens .pair-chips[data-side="target"] .token[data-index="{CLICKED}"]').click()
    wait_until(teacher, f"document.getElementById('heatmap').dataset.selectedRow === '{CLICKED}'")
    teacher.click("#class-start")
    teacher.click("#class-open")
    wait_until(teacher, "document.getElementById('class-join').href.includes('?class=')")
    join = teacher.locator("#class-join").get_attribute("href")
    learner_context = browser.new_context(viewport={"width": 390, "height": 844})
    learner = learner_context.new_page()
    learner.errors = []
    learner.on("pageerror", lambda error: learner.errors.append(str(error)))
    learner.goto(join)  # the default model's page: the teacher's view takes it to Marian's, with the target
    learner.wait_for_url(re.compile(r"model=marian"))
    wait_until(learner, f"{DRAWN} && document.body.dataset.busy === 'false'")
    if learner.locator("#class-name-skip").is_visible():
        learner.click("#class-name-skip")
    wait_until(teacher, "document.getElementById('class-presence').dataset.following === '1'")
    expect(teacher.locator("#class-kind option")).to_have_count(1)
    teacher.click("#class-ask")

    buttons = learner.locator("#class-question .choices button")
    run = teacher.evaluate(RUN)
    source = [token["label"] for token in run["source"]["tokens"]]
    expect(buttons).to_have_text(source)
    expect(learner.locator("#heatmap .hm-title")).to_have_text(BLANK)  # no numbers while the class votes
    expect(learner.locator("#attends")).to_have_text(BLANK)
    out, bound = eager(folders["marian"], SOURCE, [token["id"] for token in run["target"]["tokens"]])
    row = out.cross_attentions[1][0, 0, CLICKED].tolist()
    best = row.index(max(row))
    buttons.nth(best).click()
    expect(buttons.nth(best)).to_have_attribute("aria-pressed", "true")
    wait_until(teacher, "document.getElementById('class-stage').textContent.includes('1 vote')")
    teacher.click("#class-reveal")
    said = f"The answer: “{source[best]}”, attention weight {row[best]:.4f}. The row: “{source[0]}” {row[0]:.4f}"
    expect(teacher.locator("#class-phase")).to_contain_text(said)
    expect(learner.locator("#class-question")).to_contain_text(said)
    wait_until(learner, "document.getElementById('heatmap').pairMap.shown")  # the numbers come back
    revealed = httpx.get(f"{lab}/api/classes/{join.split('class=')[1]}").json()["question"]
    assert max(abs(value - weight) for value, weight in zip(revealed["values"], row, strict=True)) <= bound
    assert revealed["correct"] == [1.0, None]
    screenshot(learner, "encoder-decoder-class-learner-390")
    # The shipped alignment plan, made for a translation model this lab does not serve: the panel says how to get it.
    teacher.click("#plan-edit summary")
    teacher.click("#plan-align")
    made_for = "It was made for Helsinki-NLP/opus-mt-en-de; this page reads marian."
    serve = "(hf download Helsinki-NLP/opus-mt-en-de) and start the lab with ATTENTION_LAB_MODELS=Helsinki-NLP/"
    expect(teacher.locator("#plan-said")).to_contain_text(f"Opened “Alignment in translation”: 4 steps. {made_for}")
    expect(teacher.locator("#plan-said")).to_contain_text(serve)
    teacher_context.close()
    learner_context.close()
    assert teacher.errors == [] and learner.errors == []
