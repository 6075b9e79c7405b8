"""The Write panel on a tiny random GPT-2 served by `python -m app` (the packaged MiniLM beside it): ten tokens
written and streamed onto the stage, step 4 opened (its funnel, its draw, its attention row in every block and
head, the cache), every number the API's own answer for the same knobs; the view audited at a 1024×768 projector
and on a 390-wide phone; a class's learners following the teacher's writing, its tokens in a projector-size
learner's first screen; and an encoder's panel saying it reads and does not write."""

import base64
import re
import time

import httpx
import numpy as np
import pytest

from app.engine.model import packaged_model_path
from tests.browser import audit
from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_classroom import a_class, viewport_shot
from tests.conftest import LabProcess
from tests.families import build

TEXT = "The cat sat on the mat. The cat"
KNOBS = {"max_new_tokens": 10, "do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 3}
WRITTEN = "#write-tokens .written"


@pytest.fixture(scope="module")
def decoder_lab(tmp_path_factory):
    folder = build("gpt2", tmp_path_factory.mktemp("writer") / "gpt2")
    lab = LabProcess(
        folder.parent, env={"ATTENTION_LAB_MODEL_PATH": str(folder), "ATTENTION_LAB_MODELS": str(packaged_model_path())}
    )
    lab.start()
    yield lab
    lab.stop()


@pytest.fixture
def writer_page(browser, decoder_lab):
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    yield page
    context.close()
    assert errors == []


def network(page, kbytes_per_second: float | None):
    """The page's network as a phone's on a school's busy Wi-Fi (a writing's steps, a few kB each, then arrive
    apart, however busy the machine), or as it was (None)."""
    session = page.context.new_cdp_session(page)
    session.send("Network.enable")
    rate = -1 if kbytes_per_second is None else kbytes_per_second * 1000
    latency = 0 if kbytes_per_second is None else 40
    conditions = {"offline": False, "latency": latency, "downloadThroughput": rate, "uploadThroughput": rate}
    session.send("Network.emulateNetworkConditions", conditions)


def write_ten(page, url: str) -> None:
    page.goto(f"{url}/?text={TEXT.replace(' ', '+')}&panel=write&present=1")  # as a class reads it
    wait_until(page, "document.querySelector('#write-form') && document.querySelector('#tokens .token')")
    page.fill("#write-max", str(KNOBS["max_new_tokens"]))
    page.check("#write-sample")
    for knob in ("temperature", "top_k", "top_p", "seed"):
        page.fill(f"#write-{knob.replace('_', '-')}", str(KNOBS[knob]))
    # Each count of written tokens the stage shows, as it shows it.
    page.evaluate(
        """() => {
          window.grown = [];
          const tokens = document.getElementById('write-tokens');
          new MutationObserver(() => grown.push(tokens.querySelectorAll('.written').length))
            .observe(tokens, { childList: true });
        }"""
    )
    network(page, 16)  # the steps arrive apart, so the page is seen growing whatever the machine's load
    page.click("#write-go")
    done = "!document.getElementById('write-go').disabled"
    wait_until(page, f"document.querySelectorAll('{WRITTEN}').length === 10 && {done}")
    network(page, None)


def test_a_decoder_writes_ten_tokens_and_step_4_opens_with_the_apis_numbers(writer_page, decoder_lab):
    page, url = writer_page, decoder_lab.url
    write_ten(page, url)
    answer = httpx.post(f"{url}/api/generate", json={"text": TEXT, **KNOBS}, timeout=60).json()
    chips = page.locator(WRITTEN)
    assert [int(chip.get_attribute("data-id")) for chip in chips.all()] == answer["ids"]
    grown = page.evaluate("() => grown")
    assert grown == sorted(grown) and grown[-1] == 10 and any(0 < count < 10 for count in grown)  # it grew
    expect_status = page.locator("#write-status").inner_text()
    assert "Written: 10 tokens" in expect_status and "10 new tokens were asked for" in expect_status

    page.click(f'{WRITTEN}[data-step="3"]')
    step = answer["steps"][3]
    opened = page.locator("#write-step .written-step")
    assert opened.get_attribute("data-step") == "3" and int(opened.get_attribute("data-token")) == step["token"]
    stages = page.locator("#write-step .funnel-stage")
    assert [stage.get_attribute("data-stage") for stage in stages.all()] == ["softmax", "temperature", "top_k", "top_p"]
    for stage, expected in zip(stages.all(), step["funnel"], strict=True):
        rows = stage.locator("tbody tr").all()
        kept = [(id, p) for id, p in zip(expected["ids"], expected["probabilities"], strict=True) if p > 0]
        assert len(kept) == min(expected["kept"], len(expected["ids"]))  # a stage lists only what it kept
        assert [int(row.get_attribute("data-id")) for row in rows] == [id for id, _ in kept]
        assert [float(row.get_attribute("data-probability")) for row in rows] == [p for _, p in kept]
        shown = [row.locator("td").nth(1).inner_text() for row in rows]
        assert shown == [f"{p:.4f}" for _, p in kept]
    drawn = page.locator("#write-step [data-field=draw] tr.top")
    assert int(drawn.get_attribute("data-id")) == step["token"] == step["draw"]["token"]
    cells = page.evaluate(
        """() => [...document.querySelectorAll('#write-step .written-row')].map((table) =>
             [...table.querySelectorAll('tbody tr')].map((row) =>
               [...row.querySelectorAll('td')].map((cell) => Number(cell.dataset.value))))"""
    )
    rows = step["attention"]  # [layer, head, key] in float32, every block and head
    data = np.frombuffer(base64.b64decode(rows["data"]), dtype="<f4").reshape(rows["shape"])
    assert cells == data.tolist()
    assert len(cells[0][0]) == step["position"] == len(answer["prompt"]) + 3
    cache = page.locator("#write-step [data-field=cache]")
    assert int(cache.get_attribute("data-bytes")) == step["cache_bytes"]
    assert f"{step['cache_bytes'] / 1024:.1f} KiB" in cache.inner_text()

    found = audit.problems(page, 16, 16, "#panel-write")
    page.click("#panel-enlarge")  # over the whole stage, as a class reads it
    found += [f"enlarged: {problem}" for problem in audit.problems(page, 16, 16, "#panel-write")]
    screenshot(page, "80-write-step-4-1024x768")
    page.click("#panel-enlarge")
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#write-step").scroll_into_view_if_needed()
    found += [f"390: {problem}" for problem in audit.problems(page, 0, 0, "#panel-write", page_scrolls=True)]
    screenshot(page, "81-write-step-4-phone-390")
    assert found == [], "\n".join(found)

    # The whole sequence at step 4 in the lab's own views: the prompt and the four tokens written, read again.
    page.set_viewport_size({"width": 1024, "height": 768})
    before = page.evaluate("() => document.body.dataset.run")
    page.click("#write-step [data-field=read-sequence]")
    wait_until(page, f"document.body.dataset.run && document.body.dataset.run !== '{before}'")
    assert page.input_value("#prompt") == TEXT + step["written"]


# Each count of written tokens a page shows as it changes, with whether the writing it shows is still under way
# (the panel's aria-busy): a page that got the tokens only at the end records the whole count, never busy.
WATCH_GROWTH = """() => {
  window.grown = [];
  const tokens = document.getElementById('write-tokens');
  new MutationObserver(() => grown.push([
    tokens.querySelectorAll('.written').length, document.getElementById('write').getAttribute('aria-busy') === 'true',
  ])).observe(tokens, { childList: true });
}"""


# The written tokens, each wholly in the window as the page is scrolled now (and in the written row's own scroll
# box), the page not scrolled: what is not, with where it is.
FIRST_SCREEN = """() => {
  const row = document.getElementById('write-tokens'), out = scrollY ? [`the page scrolled by ${scrollY} px`] : [];
  const inside = (box, around) => box.height > 0 && box.top >= around.top - 0.5 && box.bottom <= around.bottom + 0.5
    && box.left >= around.left - 0.5 && box.right <= around.right + 0.5;
  const window = { top: 0, left: 0, bottom: innerHeight, right: innerWidth };
  for (const node of [row, ...row.querySelectorAll('.written')]) {
    const box = node.getBoundingClientRect(), at = `${Math.round(box.top)}–${Math.round(box.bottom)}`;
    if (!inside(box, window) || (node !== row && !inside(box, row.getBoundingClientRect())))
      out.push(`${node.id || node.textContent} at ${at} of ${innerHeight} px`);
  }
  return out;
}"""


def test_learners_screens_follow_the_words_as_the_teacher_writes_them(browser, decoder_lab):
    """In a class, the teacher writes ten tokens in the Write panel: each following learner's page (a phone and
    a laptop) opens the panel on the teacher's writing (named in the class's view) with the teacher's knobs,
    shows its tokens as its stream brings them, and ends with the teacher's tokens, which are POST /api/generate's
    for the same knobs. The tiny model writes ten tokens faster than a page takes to follow the view (a learner's
    page then reads the writing the lab kept once it ended: the same steps): on the phone's slow network its
    steps arrive apart, and the phone shows a count between none and ten while its stream is under way. On a
    projector-size screen (1280×720, then 1024×768) the learner's page lays the panel over the stage, the written
    tokens in its first screen; "Back to the stage" gives the stage back."""
    url = decoder_lab.url
    query = f"text={TEXT.replace(' ', '+')}&panel=write"
    with a_class(browser, url, url, query, sizes=[(390, 844), (1280, 720)]) as (teacher, learners, _):
        phones = [learner for learner in learners if learner.viewport_size["width"] < 500]
        for learner in learners:
            learner.evaluate(WATCH_GROWTH)
        for phone in phones:
            network(phone, 16)
        teacher.fill("#write-max", str(KNOBS["max_new_tokens"]))
        teacher.check("#write-sample")
        for knob in ("temperature", "top_k", "top_p", "seed"):
            teacher.fill(f"#write-{knob.replace('_', '-')}", str(KNOBS[knob]))
        teacher.click("#write-go")
        done = "document.getElementById('write-status').textContent.startsWith('Written: 10 tokens')"
        wait_until(teacher, done)
        answer = httpx.post(f"{url}/api/generate", json={"text": TEXT, **KNOBS}, timeout=60).json()
        ids = lambda page: [int(chip.get_attribute("data-id")) for chip in page.locator(WRITTEN).all()]  # noqa: E731
        assert ids(teacher) == answer["ids"]
        writing = answer["writing_id"]
        assert f"writing={writing}" in teacher.url  # the link names the writing, and so does the class's view
        found = []
        for learner in learners:
            wait_until(learner, done)
            assert ids(learner) == answer["ids"] and f"writing={writing}" in learner.url
            grown = learner.evaluate("() => grown")
            counts = [count for count, _ in grown]
            assert counts == sorted(counts) and counts[-1] == 10, grown
            if learner in phones:  # seen growing as the tokens arrive, not only at the end
                assert any(0 < count < 10 and busy for count, busy in grown), grown
            assert learner.input_value("#write-temperature") == str(KNOBS["temperature"])
            assert learner.input_value("#write-seed") == str(KNOBS["seed"])
            width = learner.viewport_size["width"]
            if width < 900:
                learner.locator("#write-tokens").scroll_into_view_if_needed()
                found += [f"{width}: {problem}" for problem in audit.problems(learner, 0, 0, "#panel-write", True)]
                viewport_shot(learner, f"82-write-followed-learner-{width}")
                continue
            for width, height in [(1280, 720), (1024, 768)]:
                learner.set_viewport_size({"width": width, "height": height})
                wait_until(learner, f"innerWidth === {width} && innerHeight === {height}")
                size = f"{width}x{height}"
                found += [f"{size}: not in the first screen: {out}" for out in learner.evaluate(FIRST_SCREEN)]
                found += [f"{size}: {problem}" for problem in audit.problems(learner, 0, 0, "#panel-write")]
                viewport_shot(learner, f"82-write-followed-learner-{size}")
            assert learner.inner_text("#panel-enlarge") == "Back to the stage"
            learner.click("#panel-enlarge")
            assert learner.locator("#prompt").is_visible() and learner.locator("#tokens .token").first.is_visible()
        assert found == [], "\n".join(found)


# Where the Write panel's parts are on screen: its tab bar, its scroll box, the written tokens' first row and the
# opened step's first line.
PLACES = """() => {
  const box = (node) => node.getBoundingClientRect();
  const panel = document.getElementById('panel-write').closest('.panels');
  const first = document.querySelector('#write-tokens .written');
  return {
    bar: box(panel.querySelector('.panel-bar')).bottom, body: box(panel.querySelector('.panel-body')),
    row: box(first), step: box(document.querySelector('#write-step .written-step > :first-child')),
    opened: box(document.getElementById('write-step')),
    window: innerHeight,
  };
}"""


def in_sight(page, what: str, opened: bool = True) -> None:
    """The written tokens' first row in sight under the panel's tab bar, inside the panel's scroll box and the
    window; the opened step's first line just under it (`opened`: the step was just opened), or else some of
    the step under it."""
    at = page.evaluate(PLACES)
    row, step, body, bottom = at["row"], at["step"], at["body"], min(at["body"]["bottom"], at["window"]) + 0.5
    assert row["top"] >= at["bar"] - 0.5 and row["top"] >= body["top"] - 0.5 and row["bottom"] <= bottom, (what, at)
    if opened:
        assert row["bottom"] - 0.5 <= step["top"] and step["bottom"] <= bottom, (what, at)
    else:
        assert at["opened"]["bottom"] > row["bottom"] + 20, (what, at)


@pytest.mark.parametrize(("width", "height", "present"), [(1024, 768, True), (1280, 720, False), (390, 844, False)])
def test_an_opened_step_leaves_the_written_tokens_in_sight(browser, decoder_lab, width, height, present):
    """A step opened from the written tokens starts just under them, and the tokens' first row stays in sight
    under the panel's tab bar, however far the step before was read, and once the panel is enlarged over the
    stage (the step read where it was): at a projector's 1024×768 (in Present, as a class reads it) and
    1280×720, and on a 390 phone; nothing in the panel is cut."""
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.goto(f"{decoder_lab.url}/?text={TEXT.replace(' ', '+')}&panel=write{'&present=1' if present else ''}")
    wait_until(page, "document.querySelector('#write-form') && document.querySelector('#tokens .token')")
    page.fill("#write-max", "10")
    page.click("#write-go")
    done = "!document.getElementById('write-go').disabled"
    wait_until(page, f"document.querySelectorAll('{WRITTEN}').length === 10 && {done}")
    found = []
    for index in (3, 8):
        page.locator(f'{WRITTEN}[data-step="{index}"]').click()
        wait_until(page, f"document.querySelector('#write-step .written-step')?.dataset.step === '{index}'")
        in_sight(page, f"step {index}")
        found += [f"step {index}: {problem}" for problem in audit.problems(page, 0, 0, "#panel-write", width < 900)]
        screenshot(page, f"83-write-step-{index + 1}-{width}x{height}", page.locator(".panels"))
        # The step read far down (its attention rows): the next one opened starts at its top again.
        page.locator("#write-step .written-row").last.scroll_into_view_if_needed()
    page.click("#panel-enlarge")  # over the whole stage: the tokens still in sight above the step
    in_sight(page, "enlarged", opened=False)
    found += [f"enlarged: {problem}" for problem in audit.problems(page, 0, 0, "#panel-write", width < 900)]
    screenshot(page, f"83-write-step-9-enlarged-{width}x{height}", page.locator(".panels"))
    page.context.close()
    assert found == [], "\n".join(found)


def test_an_encoder_says_it_reads_and_does_not_write(writer_page, decoder_lab):
    page, url = writer_page, decoder_lab.url
    models = httpx.get(f"{url}/api/models").json()["models"]
    encoder = next(model["name"] for model in models if model["name"] != "gpt2")
    said = httpx.get(f"{url}/api/model", params={"name": encoder}).json()["cannot_write"]
    assert "reads and does not write" in said
    page.goto(f"{url}/?model={encoder}&text=The+cat&panel=write")
    wait_until(page, "document.querySelector('#write [data-field=cannot-write]')")
    assert page.locator("#write [data-field=cannot-write]").inner_text() == f"{said}."
    assert page.locator("#write-go").count() == 0


def test_a_client_that_leaves_the_stream_calls_the_writing_off(decoder_lab):
    """The stream left after its first token: the lab's log says the writing was called off, long before the
    54 tokens it was asked for (the tiny model's 64 positions less the prompt's)."""
    seen = decoder_lab.log.stat().st_size
    body = {"text": "The cat sat", "max_new_tokens": 54, "do_sample": True, "seed": 11}
    with httpx.stream("POST", f"{decoder_lab.url}/api/generate/stream", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "event: step":
                break
    deadline = time.monotonic() + 30
    # Other work the page left (an analyze) may be called off too: the writing's own line.
    called_off = re.compile(rb"the writing \w+ wrote (\d+) of its 54 tokens at most: called off")
    while not (off := called_off.search(said := decoder_lab.log.read_bytes()[seen:])):
        assert time.monotonic() < deadline, said.decode()
        time.sleep(0.05)
    assert 1 <= int(off.group(1)) < 54
