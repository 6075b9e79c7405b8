"""The search lesson in chromium: index a pasted corpus, ask a query, read the top k against the API's exact
ranking, re-read them as pairs, open a result as a pair in the lab; and the class question "which document
comes first?" on a learner's phone, voted and revealed with its ranking."""

import httpx
import pytest
from playwright.sync_api import expect

from app.engine import search
from tests.browser import audit
from tests.browser.conftest import wait_until
from tests.browser.test_classroom import a_class, ready, revealed, viewport_shot, vote_on
from tests.browser.test_projectors import PROJECTORS, floor
from tests.browser.test_stage import lab_page, open_stage, settle

pytestmark = pytest.mark.slow

DOCUMENTS = "\n".join(search.shipped_documents()[::40])
QUERY = "where can I borrow money"


def exact_top(server: str, query: str, k: int = 10) -> tuple[str, list[dict]]:
    index_id = httpx.post(f"{server}/api/search/index", json={"documents": DOCUMENTS}).json()["index_id"]
    httpx.get(f"{server}/api/search/index/{index_id}", timeout=120).raise_for_status()
    found = httpx.post(f"{server}/api/search", json={"index_id": index_id, "query": query, "k": k}, timeout=60)
    return index_id, found.json()["exact"]


def test_index_a_corpus_ask_a_query_and_open_a_result_as_a_pair(page, server):
    page.goto(f"{server}/?text={QUERY.replace(' ', '+')}&panel=lessons&lesson=search")
    ready(page)
    page.fill("#search-corpus", DOCUMENTS)
    page.click("#search-index")
    expect(page.locator("#search-ask")).to_be_enabled(timeout=120_000)
    expect(page.locator("#search-status")).to_contain_text(f"{len(DOCUMENTS.splitlines())} documents")
    assert page.locator("#search-query").input_value() == QUERY  # the prompt is the query
    page.click("#search-ask")
    rows = page.locator('[data-field="exact"] tbody tr')
    expect(rows).to_have_count(10, timeout=60_000)
    _, expected = exact_top(server, QUERY)
    assert [int(rows.nth(n).get_attribute("data-document")) for n in range(10)] == [hit["document"] for hit in expected]
    recall = float(page.locator('[data-field="recall"]').get_attribute("data-value"))
    assert 0 <= recall <= 1
    # Again with typed prefixes: a second index ("passage: " before every document), and once it is made the
    # status line says what the panel holds, not that it is indexing.
    page.check("#search-compare")
    page.click("#search-ask")
    expect(page.locator('[data-field="moves"]')).to_be_visible(timeout=120_000)
    status = page.locator("#search-status")
    expect(status).not_to_contain_text("Indexing")
    expect(status).to_contain_text("each after “passage: ”")
    page.click("#search-pairs-read")
    cells = page.locator('[data-field="cells"]')
    expect(cells).to_be_visible(timeout=60_000)
    query_tokens = ["[CLS]", "where", "can", "i", "borrow", "money"]
    assert page.locator('[data-field="cells"] tbody th').all_inner_texts()[:6] == query_tokens
    expect(page.locator('[data-field="cost"] [data-way="corpus"]')).to_contain_text(f"{len(DOCUMENTS.splitlines())}")
    # The first result opened as a pair: the query as A, the document as B, the same run as the API's.
    rows.nth(0).locator('[data-field="open-pair"]').click()
    wait_until(page, "document.body.dataset.busy === 'false'")
    pair = {"text": QUERY, "text_pair": expected[0]["text"], "prompt": ""}
    run_id = httpx.post(f"{server}/api/analyze", json=pair, timeout=60).json()["run_id"]
    wait_until(page, f"document.body.dataset.run === '{run_id}'")
    expect(page.locator("#tokens")).to_contain_text("borrow")
    expect(page.locator("#tokens")).to_contain_text(expected[0]["text"].split()[-2])
    assert page.locator("#segments").input_value() == "AB"  # the heatmap shows A → B


def test_the_search_question_on_a_phone(browser, server):
    query = "sitting on the bank watching the water"
    index_id, ranking = exact_top(server, query, 4)
    with a_class(browser, server, server, f"text={query.replace(' ', '+')}", sizes=[(390, 844)]) as (
        teacher,
        learners,
        started,
    ):
        run_id = teacher.evaluate("() => document.body.dataset.run")
        body = {"kind": "search", "run_id": run_id, "index_id": index_id}
        asked = httpx.post(
            f"{server}/api/classes/{started['code']}/question", json=body, headers={"X-Class-Secret": started["secret"]}
        )
        assert asked.status_code == 201, asked.text
        phone = learners[0]
        buttons = phone.locator("#class-question .choices button")
        expect(buttons).to_have_count(4, timeout=30_000)
        assert sorted(int(buttons.nth(n).get_attribute("data-document")) for n in range(4)) == sorted(
            hit["document"] for hit in ranking
        )
        # A document is a whole line on the phone, and nothing runs off its side.
        assert phone.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        width = buttons.nth(0).evaluate("(node) => node.getBoundingClientRect().width")
        assert width > 300, width
        vote_on(phone, ranking[0]["text"])
        viewport_shot(phone, "class-search-question-phone")
        moved = httpx.post(
            f"{server}/api/classes/{started['code']}/question/reveal", headers={"X-Class-Secret": started["secret"]}
        )
        assert moved.status_code == 200, moved.text
        state = revealed(server, started["code"])
        assert state["choices"][state["answer"]["choice"]]["document"] == ranking[0]["document"]
        line = phone.locator('#class-question [data-field="reveal"]')
        expect(line).to_contain_text("cosine")
        # Of the four offered (the index's first four here), each with its place among all the index's documents.
        expect(line).to_contain_text(f"The ranking of these four: 1. “{ranking[0]['text']}” (")
        expect(line).to_contain_text(f", #4 of all {len(DOCUMENTS.splitlines())})")
        viewport_shot(phone, "class-search-question-revealed-phone")


def test_the_plan_s_prefix_step_asks_what_the_experiment_ranks(browser, server):
    """The search plan's third step, played: its question reads the query after "query: " and every document
    after "passage: ", as the experiment's "also with typed prefixes" reads them, so that the panel's ranking is
    the reveal's: the same places in the whole corpus, the same cosines."""
    query = "sitting on the bank watching the water"
    with a_class(browser, server, server, f"text={query.replace(' ', '+')}", sizes=[]) as (teacher, _, started):
        teacher.click("#plan-edit summary")
        teacher.click("#plan-search")
        wait_until(teacher, "document.getElementById('plan-said').textContent.startsWith('Opened')")
        teacher.locator("#plan-steps .plan-go").nth(2).click()
        expect(teacher.locator("#plan-now")).to_contain_text("Step 3 of 4", timeout=300_000)
        wait_until(teacher, "document.getElementById('class-stage').dataset.phase === 'open'", timeout=300)
        expect(teacher.locator("#class-stage-question")).to_have_text(
            f"Which of these four documents, each read after “passage: ”, comes first for “query: {query}”?"
        )
        teacher.click("#class-reveal")
        state = revealed(server, started["code"])
        asked = {
            choice["document"]: (rank, value)
            for choice, rank, value in zip(state["choices"], state["ranks"], state["values"], strict=True)
        }
        # The experiment, with typed prefixes, over the whole corpus's first 100.
        teacher.click("#search-index")
        expect(teacher.locator("#search-ask")).to_be_enabled(timeout=300_000)
        teacher.fill("#search-k", "100")
        teacher.check("#search-compare")
        teacher.click("#search-ask")
        moved = teacher.locator('[data-field="moves"] tbody tr')
        expect(moved).to_have_count(100, timeout=300_000)
        assert (
            teacher.locator('[data-field="moves"] caption')
            .inner_text()
            .startswith(f"Read with “query: ” and “passage: ”: “query: {query}”")
        )
        panel = {
            int(row.get_attribute("data-document")): (
                int(row.get_attribute("data-rank")),
                float(row.get_attribute("data-score")),
            )
            for row in moved.all()
        }
        for document, (rank, value) in asked.items():
            if rank <= 100:
                assert panel[document] == (rank, pytest.approx(value, abs=1e-12)), document
            else:
                assert document not in panel
        assert sorted(rank for rank, _ in asked.values())[0] <= 100  # at least one compared


RESULTS_IN_SIGHT = """(rows) => {
  // The results' caption and their first `rows` rows whole inside the panel's visible area, its height, and
  // whether the table is wider than its box (its numbers a sideways scroll away).
  const body = document.querySelector('#panel-lessons').closest('.panel-body').getBoundingClientRect();
  const parts = [document.querySelector('[data-field=exact] caption'),
    ...[...document.querySelectorAll('[data-field=exact] tbody tr')].slice(0, rows)];
  const hidden = parts.filter((part) => {
    const b = part.getBoundingClientRect();
    return b.top < body.top - 0.5 || b.bottom > Math.min(body.bottom, innerHeight) + 0.5;
  });
  const table = document.querySelector('[data-field=exact]');
  return { height: body.height, hidden: hidden.map((part) => part.textContent.slice(0, 40)),
    sideways: table.scrollWidth > table.clientWidth + 1 };
}"""

PAIR_IN_SIGHT = """() => {
  const b = document.getElementById('prompt-pair');
  const canvas = document.querySelector('#heatmap .hm-canvas').getBoundingClientRect();
  const panel = document.querySelector('.panels').getBoundingClientRect();
  const meets = panel.left < canvas.right && canvas.left < panel.right && panel.top < canvas.bottom
    && canvas.top < panel.bottom;
  return { whole: b.scrollHeight <= b.clientHeight + 1, lines: b.clientHeight, covered: meets,
    onScreen: canvas.top >= 0 && canvas.bottom <= innerHeight && canvas.width > 100,
    enlarged: document.getElementById('views').classList.contains('enlarged') };
}"""


def test_results_read_beside_the_stage_and_a_pair_opens_in_sight_at_every_projector(browser, server):
    """In Present at every projector size, the panel not enlarged: a search's results come to the top of the
    panel, their first rows whole in sight, nothing cut. Enlarged, "open as a pair" lays the panel back: the
    pair's heatmap is in sight, and B's box holds the whole document."""
    problems = []
    with lab_page(browser, *PROJECTORS[0]) as page:
        open_stage(page, server, "present=1", f"text={QUERY.replace(' ', '+')}", "panel=lessons", "lesson=search")
        page.fill("#search-corpus", DOCUMENTS)
        page.click("#search-index")
        expect(page.locator("#search-ask")).to_be_enabled(timeout=120_000)
        rows = page.locator('[data-field="exact"] tbody tr')
        for width, height in PROJECTORS:
            page.set_viewport_size({"width": width, "height": height})
            page.click("#search-ask")
            expect(rows).to_have_count(10, timeout=60_000)
            settle(page, ["#search-result", "#heatmap .hm-canvas"])
            seen = page.evaluate(RESULTS_IN_SIGHT, 2)
            label = f"{width}×{height}"
            if seen["hidden"] or seen["height"] < 220:
                problems.append(f"{label}: a {seen['height']:.0f} px panel, out of sight: {seen['hidden']}")
            if seen["sideways"]:
                problems.append(f"{label}: the results' table scrolls sideways, its numbers out of sight")
            # A pasted corpus of 77 lines scrolls in its box, as any long input does.
            read = [p for p in audit.problems(page, floor(width), 16, "main.stage") if "#search-corpus" not in p]
            problems += [f"{label}: {p}" for p in read]
            viewport_shot(page, f"search-results-present-{width}x{height}")
        page.set_viewport_size({"width": PROJECTORS[0][0], "height": PROJECTORS[0][1]})
        page.click("#search-ask")
        expect(rows).to_have_count(10, timeout=60_000)
        page.click("#panel-enlarge")
        document = rows.nth(0).get_attribute("data-document")
        text = DOCUMENTS.splitlines()[int(document)]
        rows.nth(0).locator('[data-field="open-pair"]').click()
        opened = "document.body.dataset.busy === 'false' && document.querySelectorAll('#tokens .token').length > 8"
        wait_until(page, opened)  # the pair's run: more tokens than the query's 7
        settle(page, ["#prompt-pair", "#heatmap .hm-canvas"])
        assert page.locator("#prompt-pair").input_value() == text
        seen = page.evaluate(PAIR_IN_SIGHT)
        assert seen["whole"] and not seen["enlarged"] and not seen["covered"] and seen["onScreen"], seen
        viewport_shot(page, "search-pair-present-1024x768")
    assert not problems, "\n".join(problems)
