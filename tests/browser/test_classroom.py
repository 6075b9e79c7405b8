"""Issue #32, a lesson: a teacher's page (the projector) and learners' pages (a laptop and two phones) in
chromium, through peer instruction — Ask (blind votes), Show votes, Vote again, Reveal — once on one lab
process and once on two sharing a real Redis; a next-token question on a model with an LM head; a lesson
plan saved, opened and played; a phone that follows. Every answer is checked against NumPy on the API's
float32 numbers, never against the page; every vote against the answers' CSV."""

import csv
import io
import json
import re
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from app.engine import labels as token_labels
from tests.browser import audit
from tests.browser.conftest import ARTIFACTS, wait_until
from tests.class_client import device
from tests.conftest import LabProcess
from tests.families import build

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TEXT = "I sat on the bank of the river and the bank was wet"  # "the" at 4, 7, 10; "bank" at 5 and 11
LEARNER_SIZES = [(390, 844), (360, 740), (1280, 720)]
# The module's own labs keep no memory free for runs at start (1 GiB touched page by page, seconds on a busy
# machine): their class flows ask for small runs, and the memory bound has tests of its own.
NO_RESERVE = {"ATTENTION_LAB_RESERVE_BYTES": "0"}


@pytest.fixture(scope="module")
def redis_labs(tmp_path_factory, redis_server):
    """Two lab processes sharing classes over Redis, launched (not waited for) as the module's first class flow
    begins: they start while the one-process flow runs, and the flow over Redis waits for them."""
    env = {"ATTENTION_LAB_STORE": redis_server.url, **NO_RESERVE}
    folder = tmp_path_factory.mktemp("redis-labs")
    processes = []
    for name in "ab":
        (folder / name).mkdir()
        processes.append(LabProcess(folder / name, env=env))
    launched = [(process, process.launch()) for process in processes]
    yield launched
    for process in processes:
        process.stop()


@pytest.fixture(params=["one process", "two processes over redis"])
def labs(request, server):
    """(the teacher's lab, the learners' lab): the same one, or two processes sharing a class over Redis."""
    launched = request.getfixturevalue("redis_labs")
    if request.param == "one process":
        yield server, server
        return
    for process, seen in launched:
        process.wait_started(seen)
    request.getfixturevalue("gpt2_launched")  # the next flow's lab starts while this one runs
    yield launched[0][0].url, launched[1][0].url
    for process, _ in launched:  # done with: stopped now rather than at the module's end
        process.stop()


@pytest.fixture(scope="module")
def gpt2_launched(tmp_path_factory):
    """The tiny GPT-2 (tests/families.py, seeded: the same weights for every test) on a lab of its own, launched
    once for the module's questions about a model with an LM head: (the lab, where its log was)."""
    folder = build("gpt2", tmp_path_factory.mktemp("gpt2") / "tiny-gpt2")
    lab = LabProcess(folder.parent, env={"ATTENTION_LAB_MODEL_PATH": str(folder), **NO_RESERVE})
    yield lab, lab.launch()
    lab.stop()


@pytest.fixture(scope="module")
def gpt2_lab(gpt2_launched):
    """That lab, once it has started."""
    lab, seen = gpt2_launched
    lab.wait_started(seen)
    return lab


# --- pages ---------------------------------------------------------------------------------------------------


def new_page(browser, width, height, errors, **options):
    context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True, **options)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(f"{width}×{height}: {error}"))
    page.on(
        "console",
        lambda message: message.type == "error" and errors.append(f"{width}×{height} console: {message.text}"),
    )
    return page


def ready(page):
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")


def start_class(page) -> dict:
    """Opens the class panel and starts a class: {code, secret, join_url} as the page keeps it."""
    page.click("#class-start")
    page.click("#class-open")
    wait_until(page, "document.getElementById('class-join').href.includes('?class=')")
    return page.evaluate("JSON.parse(sessionStorage.getItem('attention-lab-class'))")


def end_class(base: str, started: dict):
    httpx.delete(f"{base}/api/classes/{started['code']}", headers={"X-Class-Secret": started["secret"]})


def answers_csv(base: str, started: dict) -> list[dict]:
    secret = {"X-Class-Secret": started["secret"]}
    return list(
        csv.DictReader(io.StringIO(httpx.get(f"{base}/api/classes/{started['code']}/answers.csv", headers=secret).text))
    )


class Learners:
    """Learners on devices of their own (a loopback address and a cookie jar each), voting through the API."""

    def __init__(self, base: str, code: str, count: int):
        self.url = f"{base}/api/classes/{code}/learners"
        self.clients = [device(f"127.0.3.{n}") for n in range(1, count + 1)]
        self.ids = [
            client.post(self.url, json={"nickname": f"api {n}"}).json()["learner"]
            for n, client in enumerate(self.clients)
        ]

    def vote(self, question: str, round_: int, choices: list[int]):
        for client, learner, choice in zip(self.clients, self.ids, choices, strict=True):
            answer = client.put(
                f"{self.url}/{learner}/vote", json={"question": question, "round": round_, "choice": choice}
            )
            assert answer.status_code == 200, answer.text

    def close(self):
        for client in self.clients:
            client.close()


@contextmanager
def a_class(browser, teacher_lab, learner_lab, query: str, sizes=LEARNER_SIZES, present=False):
    """A teacher's page at 1280×720 with a class started, and a learner's page per size, each following."""
    errors = []
    teacher = new_page(browser, 1280, 720, errors)
    teacher.goto(f"{teacher_lab}/?{'present=1&' if present else ''}{query}")
    ready(teacher)
    started = start_class(teacher)
    learners = []
    try:
        join = started["join_url"].replace(teacher_lab, learner_lab)
        for width, height in sizes:
            learner = new_page(browser, width, height, errors)
            learner.goto(join)
            ready(learner)
            learner.click("#class-name-skip")  # the name asked as it joins: one tap skips it
            learners.append(learner)
        wait_until(teacher, f"document.getElementById('class-presence').dataset.following === '{len(sizes)}'")
        yield teacher, learners, started
        assert errors == [], errors
    finally:
        for page in [*learners, teacher]:
            page.context.close()
        end_class(teacher_lab, started)


def vote_on(page, label: str):
    buttons = page.locator("#class-question .choices button")
    labels = buttons.all_inner_texts()
    assert label in labels, (label, labels)
    buttons.nth(labels.index(label)).click()
    expect(buttons.nth(labels.index(label))).to_have_attribute("aria-pressed", "true")


def bars(where) -> Counter:
    """A histogram's bars as {choice label: count}."""
    labels = where.locator(".tally-label").all_inner_texts()
    return Counter(dict(zip(labels, map(int, where.locator(".tally-count").all_inner_texts()), strict=True)))


def viewport_shot(page, name: str):
    """What the window shows, as a person sees it (not the whole page)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def counted(teacher, votes: int):
    """The teacher's stage counts this many votes in the open round (the count goes out within a second)."""
    wait_until(teacher, f"document.getElementById('class-stage').textContent.includes('{votes} vote')")


def lowercase_sentences(page) -> list[str]:
    """The sentences on the learner's bar (its status, hints and lines, not the choices' token labels) that
    start with a small letter: at its start, or after a full stop, a question mark or an exclamation mark."""
    texts = page.evaluate(
        """() => [...document.querySelectorAll('#class-bar > span, #class-bar p')]
                   .filter((node) => node.offsetParent !== null).map((node) => node.innerText)"""
    )
    return [text for text in texts if re.search(r"(^|[.?!]\s+)[a-z]", text.strip())]


def choice_labels(page) -> list[str]:
    page.wait_for_selector("#class-question .choices button")
    return page.locator("#class-question .choices button").all_inner_texts()


BLIND = """() => {
  // What is on top at the centre of the heatmap and of the attends view, each scrolled into sight first.
  const onTop = (id) => {
    const node = document.getElementById(id);
    node.scrollIntoView({ block: 'center' });
    const box = node.getBoundingClientRect();
    const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    return top ? (top.closest('#class-stage') ? 'cover' : top.id || top.className || top.tagName) : 'nothing';
  };
  const canvas = document.querySelector('#heatmap .hm-canvas');
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const drawn = pixels.some((value, index) => index % 4 === 3 && value !== 0);
  const result = {
    heatmap: onTop('heatmap'), attends: onTop('attends'), drawn,
    rows: document.querySelectorAll('#attends .attend-row').length,
    text: document.body.innerText, all: document.body.textContent,
  };
  scrollTo(0, 0);
  return result;
}"""


def assert_blind(page, value: float, who: str):
    """Nothing of the asked matrix on this page: no cell colour, no bar, no readout, and the answer's value
    nowhere in its text; the stage's cover is what is on top where the heatmap and the attends view are."""
    seen = page.evaluate(BLIND)
    assert seen["heatmap"] == "cover" and seen["attends"] == "cover", (who, seen["heatmap"], seen["attends"])
    assert not seen["drawn"], f"{who}: the heatmap's canvas is drawn"
    assert seen["rows"] == 0, f"{who}: the attends view lists {seen['rows']} rows"
    for shown in (f"{value:.4f}", f"{value:.3f}"):
        assert shown not in seen["text"] and shown not in seen["all"], f"{who} shows {shown}"


# --- independent answers -----------------------------------------------------------------------------------------


def float32_attention(base: str, run_id: str, measure: str = "weights") -> np.ndarray:
    """Every block's matrices under a measure, [layer, head, query, key], float32 as the API sends them."""
    response = httpx.get(
        f"{base}/api/runs/{run_id}/attention", params={"dtype": "float32", "measure": measure}, timeout=60
    )
    response.raise_for_status()
    shape = [int(n) for n in response.headers["X-Attention-Shape"].split(",")]
    return np.frombuffer(response.content, dtype=np.float32).reshape(shape)


def attends_answer(
    attention, token, layer, heads, block_mean=False, hidden=None, renormalise=False
) -> tuple[int, float]:
    """The key the token's row peaks at in a view, in float64: the heads' mean, every block's mean, the sinks
    left out (and the rest rescaled to sum to 1)."""
    layers = range(attention.shape[0]) if block_mean else [layer]
    matrix = np.mean([attention[block][heads].astype(np.float64).mean(axis=0) for block in layers], axis=0)
    row = matrix[token].copy()
    if hidden is not None:
        if renormalise:
            row = row / row[~hidden].sum()
        row[hidden] = -np.inf
    best = int(np.argmax(row))
    return best, float(row[best])


def previous_token_head(attention, layer) -> tuple[int, float]:
    """The head of a block whose queries put the most weight, on average, on the token just before them."""
    shares = [
        float(np.diagonal(attention[layer, head].astype(np.float64), offset=-1).mean())
        for head in range(attention.shape[1])
    ]
    best = int(np.argmax(shares))
    return best, shares[best]


def labels_of(tokens) -> list[str]:
    """A token's label as every choice, bar and answer shows it: its text, and its position where it repeats."""
    texts = [token_labels.shown(token["text"]) for token in tokens]
    return [text if texts.count(text) == 1 else f"{text} #{index}" for index, text in enumerate(texts)]


# --- the flow ----------------------------------------------------------------------------------------------------


def class_question(base: str, code: str) -> dict:
    return httpx.get(f"{base}/api/classes/{code}").json()["question"]


def revealed(base: str, code: str, timeout: float = 10) -> dict:
    """The question once the server has revealed it: a click on Reveal is a request the page makes after it."""
    deadline = time.monotonic() + timeout
    while (state := class_question(base, code))["phase"] != "revealed":
        if time.monotonic() > deadline:
            raise AssertionError(f"the question is still {state['phase']} {timeout} s after Reveal")
        time.sleep(0.05)
    return state


def test_peer_instruction_blind_votes_two_rounds_and_a_reveal_for_each_kind(browser, labs):
    teacher_lab, learner_lab = labs
    query = f"text={TEXT.replace(' ', '+')}&layer=2&head=5&token=11"
    with a_class(browser, teacher_lab, learner_lab, query) as (teacher, learners, started):
        code = started["code"]
        for learner in learners:  # following: the teacher's block, head and token
            wait_until(learner, "document.querySelector('#tokens .token[aria-selected=true]')?.dataset.index === '11'")
        run = teacher.evaluate("document.body.dataset.run")
        tokens = httpx.post(f"{teacher_lab}/api/analyze", json={"text": TEXT}).json()["tokens"]
        labels = labels_of(tokens)
        weights = float32_attention(teacher_lab, run)
        answer, value = attends_answer(weights, 11, 2, [5])

        # Ask: every page goes blind; the learners choose among positions, not among look-alikes.
        teacher.click("#class-ask")
        for learner in learners:
            offered = choice_labels(learner)
            assert offered == labels, offered  # every key: bidirectional, nothing hidden
            assert {"bank #5", "bank #11", "the #4", "the #7", "the #10"} <= set(offered)
        for who, page in [("teacher", teacher), *((f"learner {i}", page) for i, page in enumerate(learners))]:
            wait_until(page, "document.body.classList.contains('blind')")
            assert_blind(page, value, f"{who}, round 1 open")
        # Round 1: the three pages and six learners on their own devices (addresses, cookie jars).
        question = class_question(learner_lab, code)
        others = Learners(learner_lab, code, 6)
        assert labels[answer] not in ("river", "bank #5", "wet"), "the votes below need the answer to be another key"
        round1 = ["river", "bank #5", labels[answer]]
        others_round1 = ["river", "river", "bank #5", labels[answer], "wet", "wet"]
        first = Counter(round1 + others_round1)  # 9 votes, 2 of them right
        for page, label in zip(learners, round1, strict=True):
            vote_on(page, label)
        others.vote(question["id"], 1, [labels.index(label) for label in others_round1])
        counted(teacher, 9)
        # Show votes: the histogram on every screen, still no answer.
        teacher.click("#class-show")
        for who, page in [("teacher", teacher), *((f"learner {i}", page) for i, page in enumerate(learners))]:
            wait_until(page, "document.getElementById('class-stage').dataset.phase === 'shown'")
            assert bars(page.locator("#class-stage")) == first, who
            assert_blind(page, value, f"{who}, round 1 shown")
        viewport_shot(teacher, "class-votes-shown-1280x720")
        # Vote again: both rounds kept.
        teacher.click("#class-again")
        for page in learners:
            wait_until(page, "document.getElementById('class-stage').dataset.round === '2'")
            expect(page.locator('#class-question [data-field="mine"]')).to_contain_text("In round 1 you chose")
        round2 = [labels[answer], labels[answer], labels[answer]]
        for page, label in zip(learners, round2, strict=True):
            vote_on(page, label)
        others_round2 = [labels[answer], "river", labels[answer], labels[answer], "wet", labels[answer]]
        others.vote(question["id"], 2, [labels.index(label) for label in others_round2])
        counted(teacher, 9)
        for who, page in [("teacher", teacher), *((f"learner {i}", page) for i, page in enumerate(learners))]:
            assert_blind(page, value, f"{who}, round 2 open")
        # A learner who explores alone is blind as well, whatever it looks at.
        alone = learners[2]
        alone.click("#class-follow")
        alone.select_option("#head", "0")
        alone.locator('#tokens .token[data-index="3"]').click()
        assert_blind(alone, value, "a learner exploring alone")
        alone.click("#class-follow")
        viewport_shot(learners[0], "class-learner-phone-blind")
        # Reveal: the answer is NumPy's argmax of the float32 row, with its value; every page sees again.
        teacher.click("#class-reveal")
        state = revealed(learner_lab, code)
        assert state["phase"] == "revealed" and state["answer"]["label"] == labels[answer]
        assert abs(state["answer"]["value"] - value) < 1e-6
        for page in [teacher, *learners]:
            wait_until(
                page, "!document.body.classList.contains('blind') && document.getElementById('class-stage').hidden"
            )
            wait_until(page, f"document.getElementById('heatmap').dataset.answer === '11,{answer}'")
            wait_until(page, f"document.querySelector('#attends .attend-row.answer')?.dataset.index === '{answer}'")
        for page in learners:
            line = page.locator('#class-question [data-field="reveal"]')
            expect(line).to_contain_text(f"“{labels[answer]}”, attention weight {value:.4f}")
            expect(page.locator('#class-question [data-field="score"]')).to_have_text("Your score: 1 of 1.")
        # The teacher's panel: round 1 and round 2 side by side, each its histogram and share right.
        for round_, votes in [(1, first), (2, Counter(round2 + others_round2))]:
            column = teacher.locator(f'#class-tally .round[data-round="{round_}"]')
            share = votes[labels[answer]] / votes.total()
            assert abs(float(column.get_attribute("data-share")) - share) < 1e-9
            expect(column.locator(".round-share")).to_have_text(f"{round(100 * share)}% right")
            assert bars(column) == votes
        viewport_shot(teacher, "class-teacher-revealed-1280x720")

        # A second kind of view: norm-weighted, a head set, every block's mean, the sinks hidden.
        view = "measure=norm&head=mean&heads=1,4,7&blocks=mean&sinks=hide&token=8"
        teacher.goto(f"{teacher_lab}/?text={TEXT.replace(' ', '+')}&{view}")
        ready(teacher)
        wait_until(teacher, "document.getElementById('class-live') && !document.getElementById('class-live').hidden")
        teacher.click("#class-ask")
        norms = float32_attention(teacher_lab, run, "norm")
        hidden = np.array([token["added"] for token in tokens])
        answer2, value2 = attends_answer(norms, 8, 0, [1, 4, 7], block_mean=True, hidden=hidden)
        offered = choice_labels(learners[2])
        assert "[CLS]" not in offered and "[SEP]" not in offered  # a hidden sink is not a choice
        vote_on(learners[2], labels[answer2])
        counted(teacher, 1)
        assert_blind(learners[2], value2, "laptop learner, norm question open")
        teacher.click("#class-reveal")
        state = revealed(learner_lab, code)
        assert state["answer"]["label"] == labels[answer2] and abs(state["answer"]["value"] - value2) < 1e-6
        assert state["measure"]["key"] == "norm"

        # A head question: which head of block 0 looks at the previous token most (NumPy on the weights).
        teacher.select_option("#class-kind", "head")
        teacher.select_option("#class-pattern", "previous")
        teacher.click("#class-ask")
        head, share = previous_token_head(weights, 0)
        assert choice_labels(learners[0]) == [f"head {h}" for h in range(weights.shape[1])]
        vote_on(learners[0], f"head {head}")
        counted(teacher, 1)
        teacher.click("#class-reveal")
        state = revealed(learner_lab, code)
        assert state["answer"]["label"] == f"head {head}" and abs(state["answer"]["value"] - share) < 1e-6
        expect(teacher.locator("#class-phase")).to_contain_text(f"“head {head}”, share {share:.4f}")

        # Ending the class deletes its answers: with votes not downloaded, End asks again and the class lives on.
        teacher.click("#class-end")
        expect(teacher.locator("#class-end")).to_contain_text("click again to end")
        assert class_question(learner_lab, code)["phase"] == "revealed"
        viewport_shot(teacher, "class-end-asks-again-1280x720")

        # The answers' CSV: every learner's two votes on the first question, one row per learner per question.
        with teacher.expect_download() as download:  # the panel's button: the server's CSV, as a file
            teacher.locator("#class-csv").click()
        rows = answers_csv(teacher_lab, started)
        assert list(csv.DictReader(io.StringIO(download.value.path().read_text()))) == rows
        first_rows = [row for row in rows if row["row"] == "learner" and row["question id"] == question["id"]]
        votes = zip(round1 + others_round1, round2 + others_round2, strict=True)
        assert sorted((row["round 1"], row["round 2"]) for row in first_rows) == sorted(votes)
        assert all(row["answer"] == labels[answer] for row in first_rows)
        assert len({row["question id"] for row in rows if row["row"] == "question"}) == 3
        others.close()

        # The answers downloaded, End ends the class at once.
        teacher.click("#class-end")
        wait_until(teacher, "document.getElementById('class-live').hidden")
        assert httpx.get(f"{learner_lab}/api/classes/{code}").status_code == 404


def test_a_next_token_question_on_a_model_with_an_lm_head(browser, gpt2_lab):
    """The tiny GPT-2 (tests/families.py): the reveal names the LM head's most probable candidate."""
    lab = gpt2_lab
    with a_class(browser, lab.url, lab.url, "text=The+river+bank+was+steep&token=2", sizes=[(390, 844)]) as (
        teacher,
        learners,
        started,
    ):
        assert teacher.locator('#class-kind option[value="next_token"]').count() == 1
        run = teacher.evaluate("document.body.dataset.run")
        candidates = httpx.get(f"{lab.url}/api/runs/{run}/tokens/2/next", params={"k": 6}).json()["candidates"]
        best = max(candidates, key=lambda candidate: candidate["probability"])
        teacher.select_option("#class-kind", "next_token")
        teacher.click("#class-ask")
        offered = choice_labels(learners[0])
        assert sorted(offered) == sorted(token_labels.shown(candidate["token"]) for candidate in candidates)
        vote_on(learners[0], offered[0])
        counted(teacher, 1)
        assert_blind(learners[0], best["probability"], "phone, next-token question open")
        teacher.click("#class-reveal")
        state = revealed(lab.url, started["code"])
        assert abs(state["answer"]["value"] - best["probability"]) < 1e-6
        assert state["answer"]["label"] == token_labels.shown(best["token"])
        expect(learners[0].locator('#class-question [data-field="reveal"]')).to_contain_text(
            f"probability {best['probability']:.4f}"
        )


def test_a_patch_question_asks_which_head_matters_most_when_patched(browser, server):
    """The teacher asks which head of block 3, its output at "bank" taken from B, moves A furthest towards B;
    the learner votes blind, and the reveal is /api/patch's cell of that block with the largest share."""
    query = "text=the+bank+of+the+river&layer=3&head=0&token=2"
    with a_class(browser, server, server, query, sizes=[(390, 844)]) as (teacher, learners, started):
        teacher.select_option("#class-kind", "patch-head")
        assert teacher.locator("#class-source").input_value() == "the bank raised rates"
        teacher.click("#class-ask")
        offered = choice_labels(learners[0])
        assert offered == [f"head {head}" for head in range(12)]
        ask = {"text": "the bank of the river", "source": "the bank raised rates", "align": "start"}
        answer = httpx.post(f"{server}/api/patch", json={**ask, "site": "head", "sweep": "blocks_heads", "position": 2})
        body = answer.json()
        a, b = body["a"]["value"], body["b"]["value"]
        shares = [(cell["value"] - a) / (b - a) for cell in body["cells"] if cell["layer"] == 3]
        vote_on(learners[0], "head 0")
        counted(teacher, 1)
        viewport_shot(learners[0], "class-patch-question-phone")
        teacher.click("#class-reveal")
        state = revealed(server, started["code"])
        assert state["answer"]["choice"] == shares.index(max(shares))
        assert abs(state["answer"]["value"] - max(shares)) < 1e-9
        expect(learners[0].locator('#class-question [data-field="reveal"]')).to_contain_text("share of the way to B")
        viewport_shot(learners[0], "class-patch-question-revealed-phone")


def test_a_lesson_plan_step_asks_which_token_matters_most_when_patched(browser, server):
    """A plan's patch question keeps its B: saved in the file, and played, it asks the class about the tokens."""
    with a_class(browser, server, server, "text=the+bank+of+the+river&layer=2", sizes=[(390, 844)]) as (
        teacher,
        learners,
        started,
    ):
        teacher.click("#plan-edit summary")
        teacher.fill("#plan-step-title", "Which word decides?")
        teacher.select_option("#plan-step-question", "patch:position")
        expect(teacher.locator("#class-source")).to_be_visible()
        teacher.fill("#class-source", "the bank raised rates")
        teacher.click("#plan-add")
        with teacher.expect_download() as download:
            teacher.click("#plan-save")
        saved = json.loads(download.value.path().read_text())
        assert saved["steps"][0]["question"] == {"kind": "patch", "by": "position", "source": "the bank raised rates"}
        teacher.click("#plan-next")
        expect(teacher.locator("#plan-now")).to_have_text("Step 1 of 1: Which word decides?")
        offered = choice_labels(learners[0])
        assert offered == ["[CLS]", "the #1", "bank", "of", "the #4", "river"]
        vote_on(learners[0], "river")
        counted(teacher, 1)
        teacher.click("#class-reveal")
        # The projector says the answer in the question's own measure, above the heatmap, whose attention
        # weights are not what the question measured.
        shares = patch_shares(server, "the bank of the river", "the bank raised rates", 2)
        best = int(np.argmax(shares))
        verdict = teacher.locator("#class-verdict")
        expect(verdict).to_have_text(f"The answer: “{offered[best]}”, share of the way to B {shares[best]:.4f}.")
        box, heatmap = verdict.bounding_box(), teacher.locator("#heatmap").bounding_box()
        assert 0 <= box["y"] and box["y"] + box["height"] <= heatmap["y"], (box, heatmap)
        rows = [(row["step"], row["round 1"]) for row in answers_csv(server, started) if row["row"] == "learner"]
        assert rows == [("1", "river")]


def test_a_model_without_an_lm_head_offers_no_next_token_question(page, server):
    page.goto(server)
    ready(page)
    assert page.locator('#class-kind option[value="next_token"]').count() == 0


# --- a lesson plan -----------------------------------------------------------------------------------------------


def test_a_lesson_plan_is_saved_opened_from_its_link_and_played(browser, server, tmp_path):
    with a_class(
        browser, server, server, f"text={TEXT.replace(' ', '+')}&layer=0&head=4&token=5", sizes=[(390, 844)]
    ) as (teacher, learners, started):
        learner = learners[0]
        # Prepared from two views, the first with a question.
        teacher.click("#plan-edit summary")
        teacher.fill("#plan-step-title", "Which bank?")
        teacher.select_option("#plan-step-question", "attends")
        teacher.fill("#plan-step-note", "They should say river.")
        teacher.click("#plan-add")
        teacher.select_option("#layer", "2")
        teacher.select_option("#head", "7")
        teacher.fill("#plan-step-title", "A sink")
        teacher.select_option("#plan-step-question", "head:cls")
        teacher.click("#plan-add")
        with teacher.expect_download() as download:
            teacher.click("#plan-save")
        saved = json.loads(download.value.path().read_text())
        assert [step["title"] for step in saved["steps"]] == ["Which bank?", "A sink"]
        assert saved["steps"][0]["view"] == {
            "text": TEXT,
            "mask": "bidirectional",
            "pooling": "mean",
            "layer": 0,
            "head": 4,
            "token": 5,
        }
        assert saved["steps"][0]["question"] == {"kind": "attends"} and saved["steps"][1]["question"] == {
            "kind": "head",
            "pattern": "cls",
        }
        teacher.click("#plan-link")
        wait_until(teacher, "document.getElementById('plan-link').dataset.url")
        link = teacher.locator("#plan-link").get_attribute("data-url")
        # The link opens the plan in another page, panel open.
        other = teacher.context.new_page()
        other.goto(link)
        ready(other)
        expect(other.locator("#plan-now")).to_have_text("2 steps: “Lesson”.")
        assert other.locator("#class-panel").is_visible()
        other.close()
        # Played: step 1 moves the class and asks its question, numbered in the CSV.
        teacher.click("#plan-next")
        expect(teacher.locator("#plan-now")).to_have_text("Step 1 of 2: Which bank?")
        wait_until(
            learner, "document.getElementById('layer').value === '0' && document.getElementById('head').value === '4'"
        )
        assert choice_labels(learner)[5] == "bank #5"
        vote_on(learner, "river")
        counted(teacher, 1)
        teacher.click("#class-show")
        teacher.click("#plan-next")
        expect(teacher.locator("#plan-now")).to_have_text("Step 2 of 2: A sink")
        wait_until(
            learner, "document.getElementById('layer').value === '2' && document.getElementById('head').value === '7'"
        )
        assert choice_labels(learner)[0] == "head 0"
        vote_on(learner, "head 7")
        counted(teacher, 1)
        teacher.click("#class-reveal")
        revealed(server, started["code"])
        rows = [
            (row["step"], row["step title"], row["round 1"])
            for row in answers_csv(server, started)
            if row["row"] == "learner"
        ]
        assert rows == [("1", "Which bank?", "river"), ("2", "A sink", "head 7")]


def test_the_plan_editor_offers_every_question_the_plan_format_takes_and_wraps_long_titles(page, server):
    """plan.js's kinds, head patterns, patch sites and tests, each a choice of the editor (a next-token question
    only where the model has an LM head, a question about a writing only where it writes, a cross-attention question
    only on an encoder-decoder: MiniLM is none of them); a long step title wraps, never cut."""
    page.goto(server)
    ready(page)
    page.click("#class-start")
    page.click("#plan-edit summary")
    declared = page.evaluate(
        """async () => {
             const plan = await import('/static/js/class/plan.js');
             return { kinds: plan.QUESTION_KINDS, patterns: plan.PATTERNS, by: plan.PATCH_BY, tests: plan.TESTS };
           }"""
    )
    options = page.locator("#plan-step-question option")
    values = [options.nth(n).get_attribute("value") for n in range(options.count())]
    expected = [""]
    for kind in declared["kinds"]:
        if kind == "head":
            expected += [f"head:{pattern}" for pattern in declared["patterns"]]
        elif kind == "patch":
            expected += [f"patch:{by}" for by in declared["by"]]
        elif kind not in ("next_token", "written", "temperature", "cross_attends"):
            expected.append(kind)
    assert values == expected
    assert {"head:sep", "head:self", "head:next"} <= set(values)
    assert all(label.strip() and "undefined" not in label for label in options.all_inner_texts())
    tests = page.locator("#plan-step-test option")
    assert [tests.nth(n).get_attribute("value") for n in range(tests.count())] == ["", *declared["tests"]]
    patterns = page.locator("#class-pattern option")  # the panel's own ask row offers them too
    assert [patterns.nth(n).get_attribute("value") for n in range(patterns.count())] == declared["patterns"]

    title = "Which “the” does the second “bank” attend to most, and why not the river?"  # 74 of 80
    page.fill("#plan-step-title", title)
    page.select_option("#plan-step-question", "head:next")
    page.select_option("#plan-step-test", "pre")
    page.click("#plan-add")
    go = page.locator("#plan-steps .plan-go").first
    expect(go).to_have_text(f"1. {title} · pre-test")
    box = go.evaluate(
        "(node) => ({ scroll: node.scrollWidth, client: node.clientWidth, height: node.clientHeight,"
        " line: parseFloat(getComputedStyle(node).lineHeight) || 20 })"
    )
    assert box["scroll"] <= box["client"], box  # nothing cut off at the side
    assert box["height"] > 1.5 * box["line"], box  # the title goes on over more lines
    with page.expect_download() as download:
        page.click("#plan-save")
    saved = json.loads(download.value.path().read_text())
    assert saved["steps"][0]["question"] == {"kind": "head", "pattern": "next", "test": "pre"}


def test_the_sample_lesson_is_served_and_its_answers_are_the_readmes(api, server):
    """The sample plan as the README tells it: each step's answer, from NumPy on the API's float32 weights."""
    plan = api.get("/static/lessons/sample.json").json()
    assert plan["format"] == "attention-lab lesson plan"
    found = []
    for step in plan["steps"]:
        view, question = step["view"], step["question"]
        run = api.post("/api/analyze", json={"text": view["text"]}).json()
        weights = float32_attention(server, run["run_id"])
        texts = [token["text"] for token in run["tokens"]]
        if question["kind"] == "attends":
            key, value = attends_answer(weights, view["token"], view["layer"], [view["head"]])
            found.append((texts[view["token"]], texts[key], round(value, 2)))
        elif question["pattern"] == "previous":
            head, share = previous_token_head(weights, view["layer"])
            found.append(("previous", head, round(100 * share)))
        else:  # the first token's share: the [CLS] sink
            shares = weights[view["layer"], :, :, 0].astype(np.float64).mean(axis=1)
            found.append(("cls", int(np.argmax(shares)), round(100 * float(shares.max()))))
    assert found == [("bank", "river", 0.66), ("bank", "account", 0.83), ("cls", 7, 86), ("previous", 2, 100)]


# --- what a class learned: pre-test, questions in rounds, post-test -----------------------------------------------

VECTOR_PLAN = "ids-to-sentence-vector.json"


def patch_shares(base: str, text: str, source: str, layer: int) -> list[float]:
    """Each of A's positions' share of the way to B's sentence vector when its residual before `layer` is
    taken from B: (cell − A) / (B − A) of /api/patch's cosines."""
    body = {"text": text, "source": source, "align": "start", "site": "resid_pre", "sweep": "blocks_positions"}
    answer = httpx.post(f"{base}/api/patch", json=body, timeout=120).json()
    a, b = answer["a"]["value"], answer["b"]["value"]
    return [(cell["value"] - a) / (b - a) for cell in answer["cells"] if cell["layer"] == layer]


def step_answer(base: str, step: dict) -> tuple[list[str], int, float, float]:
    """A plan step's question answered here: (the choices' labels, the right one, its value, the runner-up's)."""
    view, question = step["view"], step["question"]
    run = httpx.post(f"{base}/api/analyze", json={"text": view["text"]}).json()
    labels = labels_of(run["tokens"])
    if question["kind"] == "attends":
        row = float32_attention(base, run["run_id"])[view["layer"], view["head"], view["token"]].astype(np.float64)
        values = list(row)
    else:
        assert (question["kind"], question["by"]) == ("patch", "position")
        values = patch_shares(base, view["text"], question["source"], view["layer"])
    best = int(np.argmax(values))
    return labels, best, values[best], sorted(values)[-2]


def test_the_ready_lesson_asks_questions_with_clear_answers_on_minilm(api, server):
    """The plan from ids to the sentence vector, each question asked of a class through the API: the
    server's answer is the one worked out here (NumPy, /api/patch), well ahead of the runner-up, and the
    numbers its notes tell the teacher."""
    plan = api.get(f"/static/lessons/{VECTOR_PLAN}").json()
    assert plan["format"] == "attention-lab lesson plan" and plan["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    asked = [step for step in plan["steps"] if step["question"]]
    assert [step["question"].get("test") for step in asked] == ["pre", None, None, "post"]
    started = api.post("/api/classes").json()
    classes, secret = f"/api/classes/{started['code']}", {"X-Class-Secret": started["secret"]}
    found = []
    try:
        for step in asked:
            view, question = step["view"], step["question"]
            labels, best, value, runner_up = step_answer(server, step)
            assert value - runner_up > 0.4, (step["title"], value, runner_up)
            run = api.post("/api/analyze", json={"text": view["text"]}).json()["run_id"]
            body = {"run_id": run, "layer": view["layer"], **{k: v for k, v in question.items() if k != "text"}}
            if question["kind"] == "attends":
                body |= {"token": view["token"], "head": view["head"]}
            made = api.post(f"{classes}/question", json=body, headers=secret)
            assert made.status_code == 201, made.text
            if question.get("test") == "pre":
                assert api.post(f"{classes}/question/close", headers=secret).status_code == 200
                rows = list(csv.DictReader(io.StringIO(api.get(f"{classes}/answers.csv", headers=secret).text)))
                answer = next(row["answer"] for row in rows if row["row"] == "question")
            else:
                revealed = api.post(f"{classes}/question/reveal", headers=secret).json()
                assert abs(revealed["answer"]["value"] - value) < 1e-6
                answer = revealed["answer"]["label"]
            assert answer == labels[best]
            found.append((labels[best], round(value, 2)))
        assert found == [("river", 1.0), ("river", 0.72), ("river", 0.89), ("river", 1.0)]
        # “bank”, which many will pick, moves the sentence vector 0.00 before block 0 and 0.07 before block 5.
        bank = [
            round(patch_shares(server, step["view"]["text"], step["question"]["source"], layer)[3], 2)
            for step, layer in ((asked[0], 0), (asked[2], 5))
        ]
        assert bank == [0.0, 0.07]
    finally:
        api.delete(classes, headers=secret)


def js_round(value: float) -> int:
    """Math.round: halves go up (Python's round takes them to the even number)."""
    return int(np.floor(value + 0.5))


def change_line(first: float, second: float | None) -> str:
    if second is None:
        return f"Round 1: {js_round(100 * first)}% right."
    change = js_round(100 * (second - first))
    sign = "−" if change < 0 else "+"
    rounds = f"Round 1: {js_round(100 * first)}% right → Round 2: {js_round(100 * second)}% right"
    return f"{rounds}, {sign}{abs(change)} points."


def test_a_lesson_with_a_pre_test_two_questions_in_rounds_and_a_post_test_measures_the_gain(browser, server):
    """The ready plan played to a teacher's page and three learners' pages, each in its own browser: the
    pre-test is answered alone and closed with nothing shown, two questions go through both rounds, and the
    post-test measures the class. Every share, change and gain on the projector, on each phone and in the
    CSV is worked out here from the votes cast here, the right choices from NumPy and /api/patch."""
    plan = httpx.get(f"{server}/static/lessons/{VECTOR_PLAN}").json()
    asked = [step for step in plan["steps"] if step["question"]]
    answers = [step_answer(server, step) for step in asked]
    query = "text=the+river+bank+was+closed&layer=0&head=4&token=3"
    with a_class(browser, server, server, query) as (teacher, learners, started):
        teacher.click("#plan-edit summary")
        teacher.click("#plan-vector")
        expect(teacher.locator("#plan-now")).to_have_text("5 steps: “From ids to a sentence vector, measured”.")

        def vote_all(labels: list[str]):
            for page, label in zip(learners, labels, strict=True):
                vote_on(page, label)
            counted(teacher, len(labels))

        def phase(value: str):
            for page in learners:
                wait_until(page, f"document.getElementById('class-stage').dataset.phase === '{value}'")

        def closed_for_everyone(test: str):
            """Nothing of a closed test on any screen: no histogram, no answer, no share. A pre-test's views come
            back (the lesson goes on); a post-test's stay covered until its reveal."""
            for page in [teacher, *learners]:
                if test == "pre":
                    wait_until(page, "document.getElementById('class-stage').hidden")
                    wait_until(page, "!document.body.classList.contains('blind')")
                else:
                    wait_until(page, "document.getElementById('class-stage').dataset.phase === 'closed'")
                    wait_until(page, "document.body.classList.contains('blind')")
                assert page.locator(".histogram, .round-share, [data-field='reveal']").count() == 0
            expect(learners[0].locator('#class-question [data-field="mine"]')).to_contain_text(
                f"{test.title()}-test closed"
            )

        # 1. The pre-test: one round, alone. No Show votes, no Vote again, no Reveal: Close.
        teacher.click("#plan-next")
        labels, right, _, _ = answers[0]
        wrong = [label for label in labels if label != labels[right]]
        pre = [labels[right], wrong[2], wrong[1]]  # "river", then two others
        phase("open")
        expect(learners[1].locator("#class-question .hint").first).to_contain_text("pre-test: answer alone")
        expect(teacher.locator("#class-show")).to_be_disabled()
        expect(teacher.locator("#class-reveal")).to_be_disabled()
        vote_all(pre)
        teacher.click("#class-close")
        closed_for_everyone("pre")
        expect(teacher.locator("#class-gain")).to_be_hidden()

        # 2. Ids, then rows: no question. 3 and 4: two questions in rounds.
        teacher.click("#plan-next")
        expect(teacher.locator("#plan-now")).to_have_text("Step 2 of 5: Ids, then a row each")
        changes = []
        for number, (labels, right, _, _) in zip((3, 4), answers[1:3], strict=True):
            teacher.click("#plan-next")
            expect(teacher.locator("#plan-now")).to_contain_text(f"Step {number} of 5")
            others = [label for label in labels if label != labels[right]]
            one = [labels[right], "bank", others[0] if others[0] != "bank" else others[1]]
            two = [labels[right], labels[right], "bank"] if number == 3 else [labels[right]] * 3
            phase("open")
            vote_all(one)
            teacher.click("#class-show")
            phase("shown")
            teacher.click("#class-again")
            wait_until(learners[0], "document.getElementById('class-stage').dataset.round === '2'")
            vote_all(two)
            teacher.click("#class-reveal")
            revealed(server, started["code"])
            shares = [sum(vote == labels[right] for vote in votes) / 3 for votes in (one, two)]
            line = teacher.locator('#class-tally [data-field="change"]')
            expect(line).to_have_text(change_line(*shares))
            assert int(line.get_attribute("data-change")) == js_round(100 * (shares[1] - shares[0]))
            changes.append(shares)
            if number == 3:
                viewport_shot(teacher, "class-change-revealed-1280x720")

        # 5. The post-test: closing it measures the class; each learner sees their own.
        teacher.click("#plan-next")
        labels, right, _, _ = answers[3]
        post = [labels[right], labels[right], "bank"]
        phase("open")
        vote_all(post)
        teacher.click("#class-close")
        closed_for_everyone("post")
        was = [vote == answers[0][0][answers[0][1]] for vote in pre]
        now = [vote == labels[right] for vote in post]
        class_pre, class_post = sum(was) / 3, sum(now) / 3
        class_gain = (class_post - class_pre) / (1 - class_pre)
        gain = teacher.locator('#class-gain [data-field="gain"]')
        expect(gain).to_contain_text(
            f"pre-test {js_round(100 * class_pre)}% right → post-test {js_round(100 * class_post)}% right"
        )
        expect(gain).to_contain_text(f"⟨g⟩ = (post − pre) / (1 − pre) = {class_gain:.2f}")
        assert abs(float(gain.get_attribute("data-gain")) - class_gain) < 1e-9
        for page, before, after in zip(learners, was, now, strict=True):
            mine = page.locator('#class-learned [data-field="gain"]')
            expect(mine).to_contain_text(f"pre-test {100 * before}% right → post-test {100 * after}% right")
            if before:
                expect(mine).to_contain_text("undefined")
            else:
                expect(mine).to_contain_text(f"Your gain g = (post − pre) / (1 − pre) = {float(after):.2f}")
            assert lowercase_sentences(page) == []
        viewport_shot(learners[0], "class-gain-phone-390")
        teacher.click("#class-reveal")  # the post-test's answer, at last
        revealed(server, started["code"])
        wait_until(teacher, "!document.body.classList.contains('blind')")
        expect(teacher.locator('#class-tally [data-field="change"]')).to_have_text(change_line(class_post, None))
        expect(gain).to_be_visible()
        viewport_shot(teacher, "class-gain-revealed-1280x720")

        # The CSV: each question's shares and change, the lesson's, each learner's gain and the class's.
        rows = answers_csv(server, started)
        number = lambda row, column: float(row[column]) if row[column] else None  # noqa: E731
        columns = ["share right in round 1", "share right in round 2", "change in points"]
        questions = [[number(row, column) for column in columns] for row in rows if row["row"] == "question"]
        expected = [[class_pre, None, None]]
        expected += [[one, two, 100 * (two - one)] for one, two in changes]
        expected += [[class_post, None, None]]
        assert len(questions) == 4
        for got, want in zip(questions, expected, strict=True):
            assert got == pytest.approx(want, abs=0.06)
        (lesson,) = [row for row in rows if row["row"] == "lesson"]
        means = [sum(shares[n] for shares in changes) / 2 for n in (0, 1)]
        assert [number(lesson, column) for column in columns] == pytest.approx(
            [*means, 100 * (means[1] - means[0])], abs=0.06
        )
        gains = [row for row in rows if row["row"] == "learner gain"]
        assert [row["learner"] for row in gains] == ["learner 1", "learner 2", "learner 3"]
        for row, before, after in zip(gains, was, now, strict=True):
            assert (number(row, "pre-test share right"), number(row, "post-test share right")) == (before, after)
            if before:
                assert row["gain g"].startswith("The gain g is undefined")
            else:
                assert number(row, "gain g") == after
        (whole,) = [row for row in rows if row["row"] == "class gain"]
        tests = ["pre-test share right", "post-test share right", "gain g"]
        assert [number(whole, column) for column in tests] == pytest.approx(
            [class_pre, class_post, class_gain], abs=1e-4
        )
        learner_rows = [row for row in rows if row["row"] == "learner"]
        assert sorted(row["round 1"] for row in learner_rows if row["test"] == "pre") == sorted(pre)
        assert sorted(row["round 1"] for row in learner_rows if row["test"] == "post") == sorted(post)


# --- a phone that follows ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(360, 740), (390, 844)])
def test_a_joining_phone_asks_the_name_up_front_one_tap_skips_it_and_the_bar_changes_it(browser, server, width, height):
    errors = []
    teacher = new_page(browser, 1280, 720, errors)
    teacher.goto(f"{server}/?text=the+river+bank")
    ready(teacher)
    started = start_class(teacher)
    phones = [new_page(browser, width, height, errors) for _ in range(2)]
    try:
        assert started["anonymous"] is False
        expect(teacher.locator("#class-names")).to_be_hidden()
        for phone in phones:
            phone.goto(started["join_url"])
            ready(phone)
            form = phone.locator("#class-name")
            expect(form).to_be_visible()
            seen = phone.evaluate(
                """() => {
                     const box = (s) => document.querySelector(s).getBoundingClientRect();
                     const parts = ['#class-name label', '#class-nickname', '#class-name-ok', '#class-name-skip'];
                     return { parts: parts.map((s) => { const b = box(s); return [b.left, b.right, b.top, b.bottom]; }),
                              wide: document.documentElement.scrollWidth, focused: document.activeElement.id };
                   }"""
            )
            for left, right, top, bottom in seen["parts"]:  # the whole form on the first screen, nothing cut
                assert left >= 0 and right <= width and top >= 0 and bottom <= height, seen
            assert seen["wide"] <= width and seen["focused"] == "class-nickname", seen
        viewport_shot(phones[1], f"class-join-name-{width}")
        # One names itself; the other skips with one tap and adds a name later from the class bar.
        phones[0].fill("#class-nickname", "Ada")
        phones[0].click("#class-name-ok")
        expect(phones[0].locator("#class-name")).to_be_hidden()
        expect(phones[0].locator("#class-name-edit")).to_have_text("Name: Ada")
        phones[1].click("#class-name-skip")
        expect(phones[1].locator("#class-name")).to_be_hidden()
        edit = phones[1].locator("#class-name-edit")
        expect(edit).to_have_text("Add your name")
        box = edit.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height
        wait_until(teacher, "document.getElementById('class-presence').dataset.learners === '2'")
        secret = {"X-Class-Secret": started["secret"]}
        run = teacher.evaluate("document.body.dataset.run")
        ask = {"kind": "head", "run_id": run, "layer": 0, "pattern": "previous"}
        assert httpx.post(f"{server}/api/classes/{started['code']}/question", json=ask, headers=secret).is_success

        def names() -> list[str]:
            return [row["learner"] for row in answers_csv(server, started) if row["row"] == "learner"]

        assert names() == ["Ada", "learner 2"]
        # What each phone says of its vote is what the CSV does with it.
        tally = "The class sees only the tally; the teacher's file lists your vote under"
        who = [phone.locator('#class-question [data-field="who-sees"]') for phone in phones]
        expect(who[0]).to_have_text(f"{tally} your name “Ada”.")
        expect(who[1]).to_have_text(f"{tally} a number (you gave no name).")
        expect(phones[0].locator("#class-anonymous")).to_be_hidden()
        edit.click()
        expect(phones[1].locator("#class-name")).to_be_visible()
        phones[1].fill("#class-nickname", "Bo")
        phones[1].press("#class-nickname", "Enter")
        expect(edit).to_have_text("Name: Bo")
        expect(who[1]).to_have_text(f"{tally} your name “Bo”.")
        assert [lowercase_sentences(phone) for phone in phones] == [[], []]
        deadline = time.monotonic() + 10
        while names() != ["Ada", "Bo"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert names() == ["Ada", "Bo"]
        phones[0].reload()  # a reload rejoins as the same learner: the name is not asked again
        ready(phones[0])
        expect(phones[0].locator("#class-name-edit")).to_have_text("Name: Ada")
        expect(phones[0].locator("#class-name")).to_be_hidden()
        assert errors == [], errors
    finally:
        for page in [*phones, teacher]:
            page.context.close()
        end_class(server, started)


def test_a_following_phone_shows_the_views_first(browser, server):
    """A phone of each size follows the same class: each loads at its own size, and each explores alone on its own."""
    phones = [(360, 740), (390, 844)]
    with a_class(browser, server, server, "layer=3&head=2&token=4", sizes=phones) as (teacher, learners, _):
        for phone, (width, height) in zip(learners, phones, strict=True):
            follows_first(phone, width, height)


def follows_first(phone, width: int, height: int):
    """A following phone shows the heatmap and the start of the attends view first, its controls folded away."""
    wait_until(phone, "document.querySelector('#heatmap')?.dataset.view?.endsWith(':3:2:4')")
    boxes = phone.evaluate(
        """() => Object.fromEntries(['#heatmap .hm-canvas', '#attends', '#prompt', '.toolbar'].map((s) => {
             const node = document.querySelector(s); const b = node.getBoundingClientRect();
             return [s, { top: b.top, bottom: b.bottom, height: b.height, shown: node.checkVisibility() }];
           }))"""
    )
    canvas, attends = boxes["#heatmap .hm-canvas"], boxes["#attends"]
    assert canvas["top"] >= 0 and canvas["bottom"] <= height, canvas  # the whole heatmap on the first screen
    assert attends["top"] < height - 60, attends  # the attends view starts on it too
    assert not boxes["#prompt"]["shown"] and not boxes[".toolbar"]["shown"]  # the controls fold away
    phone.click("#class-controls")
    expect(phone.locator("#prompt")).to_be_visible()
    expect(phone.locator("#class-controls")).to_have_attribute("aria-expanded", "true")
    phone.click("#class-follow")  # exploring alone: the controls are there
    expect(phone.locator(".toolbar")).to_be_visible()
    if (width, height) == (390, 844):
        phone.click("#class-follow")
        phone.click("#class-controls")
        viewport_shot(phone, "class-phone-following-390")


def test_which_token_comes_next_at_a_step_of_a_writing(browser, gpt2_lab):
    """The shipped plan "A decoder writes" on a tiny GPT-2 (the lab ships no decoder): its second step asks the
    class which token the greedy writing writes second; three learners see the words so far and vote; the reveal
    gives the step's own probabilities (POST /api/generate's funnel, held to transformers' by test_writing) and the
    token written, on every screen; then whether temperature 0.2 or 1.5 makes the likeliest first token likelier.
    Audited at 1024×768 (the teacher's projector) and on a 390 phone."""
    lab = gpt2_lab
    plan = json.loads((ROOT / "static" / "lessons" / "write.json").read_text())
    second = plan["steps"][1]
    text = second["view"]["text"]
    query = f"text={text.replace(' ', '+')}"
    with a_class(browser, lab.url, lab.url, query, present=True) as (teacher, learners, started):
        teacher.set_viewport_size({"width": 1024, "height": 768})
        teacher.click("#plan-edit summary")
        for kind in ("written", "temperature"):  # the editor offers them on a model that writes
            assert teacher.locator(f'#plan-step-question option[value="{kind}"]').count() == 1
        teacher.click("#plan-write")
        expect(teacher.locator("#plan-said")).to_contain_text("6 steps")
        teacher.click("#plan-next")  # Start: the first token
        wait_until(teacher, "document.getElementById('class-stage').dataset.phase === 'open'")
        teacher.click("#plan-next")  # the second
        deadline = time.monotonic() + 10
        while (asked := class_question(lab.url, started["code"]))["view"]["index"] != 1:
            assert time.monotonic() < deadline, asked
            time.sleep(0.05)
        steps = httpx.post(f"{lab.url}/api/generate", json={"text": text, **second["question"]["writing"]}).json()
        words = text + steps["steps"][0]["written"]
        assert asked["words"] == words
        so_far = f"Written so far: {words} …"
        expect(teacher.locator("#class-stage [data-field=written-so-far]")).to_have_text(so_far)
        offered = choice_labels(learners[0])
        for learner in learners:
            expect(learner.locator("#class-question [data-field=written-so-far]")).to_have_text(so_far)
            assert sorted(choice_labels(learner)) == sorted(offered)
        for learner, label in zip(learners, [offered[0], offered[1], offered[0]], strict=True):
            vote_on(learner, label)
        counted(teacher, 3)
        found = audit.problems(teacher, 16, 16, "header.topbar, main.stage, #class-panel", page_scrolls=True)
        viewport_shot(teacher, "class-written-open-1024x768")
        found += [f"390: {p}" for p in audit.problems(learners[0], 0, 0, "header.topbar, #class-bar", True)]
        viewport_shot(learners[0], "class-written-open-phone-390")

        teacher.click("#class-reveal")
        state = revealed(lab.url, started["code"])
        step = steps["steps"][1]
        last = step["funnel"][-1]
        chances = dict(zip(map(token_labels.shown, last["tokens"]), last["probabilities"], strict=True))
        labels = [choice["label"] for choice in state["choices"]]
        assert state["values"] == [chances[label] for label in labels]
        assert state["answer"]["value"] == last["probabilities"][0]
        drawn = labels[state["drawn"]]
        assert drawn == token_labels.shown(step["text"]) and state["drawn"] == state["answer"]["choice"]  # greedy
        probability = f"probability {last['probabilities'][0]:.4f}"
        for learner in learners:
            line = learner.locator('#class-question [data-field="reveal"]')
            expect(line).to_contain_text(probability)
            expect(line).to_contain_text(f"The writing drew “{drawn}”")
            expect(learner.locator("#class-question [data-field=written-drawn]")).to_have_text(drawn)
        expect(teacher.locator("#class-verdict")).to_contain_text(probability)
        found += audit.problems(teacher, 16, 16, "header.topbar, main.stage, #class-panel", page_scrolls=True)
        viewport_shot(teacher, "class-written-revealed-1024x768")
        found += [f"390: {p}" for p in audit.problems(learners[0], 0, 0, "header.topbar, #class-bar", True)]
        viewport_shot(learners[0], "class-written-revealed-phone-390")

        # Step 4: with temperature 0.2 or 1.5, which makes the likeliest first token likelier?
        teacher.click("#plan-next")
        wait_until(teacher, "document.getElementById('plan-now').dataset.step === '3'")
        teacher.click("#plan-next")
        deadline = time.monotonic() + 10
        while (asked := class_question(lab.url, started["code"]))["kind"] != "temperature":
            assert time.monotonic() < deadline, asked
            time.sleep(0.05)
        assert sorted(choice_labels(learners[0])) == ["temperature 0.2", "temperature 1.5"]
        for learner in learners:
            vote_on(learner, "temperature 1.5")
        counted(teacher, 3)
        found += [f"390: {p}" for p in audit.problems(learners[0], 0, 0, "header.topbar, #class-bar", True)]
        teacher.click("#class-reveal")
        state = revealed(lab.url, started["code"])
        assert state["answer"]["label"] == "temperature 0.2"
        line = learners[0].locator('#class-question [data-field="reveal"]')
        expect(line).to_contain_text(f"“temperature 0.2”, probability {state['answer']['value']:.4f}")
        at_hot = state["values"][[choice["label"] for choice in state["choices"]].index("temperature 1.5")]
        expect(line).to_contain_text(f"{at_hot:.4f} at temperature 1.5")
        found += [f"390: {p}" for p in audit.problems(learners[0], 0, 0, "header.topbar, #class-bar", True)]
        viewport_shot(learners[0], "class-temperature-revealed-phone-390")
        found += audit.problems(teacher, 16, 16, "header.topbar, main.stage, #class-panel", page_scrolls=True)
        viewport_shot(teacher, "class-temperature-revealed-1024x768")
        assert found == [], "\n".join(found)
