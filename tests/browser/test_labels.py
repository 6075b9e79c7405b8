"""Issue #44 item 3: a repeated word is told apart the same way in every place the page names a token — the
chips, both axes of the heatmap, its readout and tooltip, the attends view, the exports, and a class question's
choices, tally, reveal and answers' CSV. Every name is checked against the label the API gives the token at
that position (tests/test_api.py checks those labels against the tokenizer's own pieces)."""

import csv
import io
import json
from collections import Counter

import httpx
import numpy as np
import pytest

from tests.browser.conftest import save, wait_until
from tests.browser.test_classroom import (
    Learners,
    answers_csv,
    bars,
    choice_labels,
    counted,
    end_class,
    float32_attention,
    new_page,
    ready,
    revealed,
    start_class,
    vote_on,
)
from tests.browser.test_page import cell_centre, wait_view

pytestmark = pytest.mark.slow

TEXT = "a dog saw a cat and a bird near a tree"
A = [1, 4, 7, 10]  # the four "a", after [CLS]
QUERY = 4


def named(page, rows: str) -> dict[int, str]:
    """{token index: the text shown} for the elements `rows` selects, each carrying data-index."""
    return dict(
        page.locator(rows).evaluate_all(
            """(nodes) => nodes.map((node) => [
                 Number(node.dataset.index), (node.querySelector('.attend-token') ?? node).textContent,
               ])"""
        )
    )


def test_every_place_names_each_repeated_token_by_one_label(browser, server, api):
    tokens = api.post("/api/analyze", json={"text": TEXT}).json()["tokens"]
    labels = [token["label"] for token in tokens]
    assert [labels[index] for index in A] == ["a #1", "a #4", "a #7", "a #10"]
    everyone = dict(enumerate(labels))
    # A head where "a #4" attends most to one of the "a": the revealed answer then names a repeated token.
    run = api.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    weights = float32_attention(server, run)
    layer, head = next(
        (layer, head)
        for layer in range(weights.shape[0])
        for head in range(weights.shape[1])
        if int(np.argmax(weights[layer, head, QUERY])) in A
    )
    answer = int(np.argmax(weights[layer, head, QUERY]))

    errors = []
    teacher = new_page(browser, 1280, 720, errors)
    learner = new_page(browser, 390, 844, errors)
    started = None
    try:
        teacher.goto(f"{server}/?text={TEXT.replace(' ', '+')}&layer={layer}&head={head}&token={QUERY}")
        wait_view(teacher, "heatmap", layer, head, QUERY)
        wait_view(teacher, "attends", layer, head, QUERY)

        # The chips: the label's text, the position a mark of its own, the id below.
        chips = teacher.locator("#tokens .token .token-text").all_text_contents()
        assert chips == labels
        assert teacher.locator("#tokens .token-mark").all_text_contents() == [" #1", " #4", " #7", " #10"]
        assert teacher.locator('#tokens .token[data-index="4"] .token-id').text_content() == str(tokens[4]["id"])
        # Both axes of the heatmap, and the attends view's queries and keys.
        assert named(teacher, "#heatmap .hm-ylabels span") == everyone
        assert named(teacher, "#heatmap .hm-xlabels span") == everyone
        assert named(teacher, "#attends .attend-queries > li") == everyone
        assert named(teacher, "#attends .attend-keys > li[data-index]") == everyone
        assert f"“{labels[QUERY]}” (token {QUERY})" in teacher.locator("#attends .caption").text_content()
        # The readout, cell by cell along the selected row, from the keyboard.
        teacher.locator("#heatmap .hm-plot").focus()
        teacher.keyboard.press("Home")
        for col in range(len(tokens)):
            if col:
                teacher.keyboard.press("ArrowRight")
            readout = teacher.locator("#heatmap-readout").text_content()
            assert readout == f"A[{QUERY},{col}] = {weights[layer, head, QUERY, col]:.4f}, “a #4” → “{labels[col]}”"
        # The tooltip over a cell between two other "a".
        teacher.mouse.move(*cell_centre(teacher, 7, 10))
        assert "query “a #7” (7) → key “a #10” (10)" in teacher.locator("#heatmap .hm-tooltip").inner_text()
        # The exports: the CSV's header row and first column, the JSON's tokens.
        with teacher.expect_download() as download:
            save(teacher, "export-csv")
        rows = list(csv.reader(io.StringIO(download.value.path().read_text())))
        assert rows[2] == ["query \\ key", *labels]
        assert [row[0] for row in rows[3:]] == labels
        with teacher.expect_download() as download:
            save(teacher, "export-json")
        assert [token["label"] for token in json.loads(download.value.path().read_text())["tokens"]] == labels

        # A class question on the selected "a #4": its choices, the tally, the reveal and the answers' CSV.
        started = start_class(teacher)
        learner.goto(started["join_url"])
        ready(learner)
        wait_until(teacher, "document.getElementById('class-presence').dataset.following === '1'")
        teacher.click("#class-ask")
        assert choice_labels(learner) == labels  # every key: bidirectional, nothing hidden
        code = started["code"]
        question = httpx.get(f"{server}/api/classes/{code}").json()["question"]
        assert [choice["label"] for choice in question["choices"]] == labels
        others = Learners(server, code, 1)
        try:
            vote_on(learner, "a #7")
            others.vote(question["id"], 1, [labels.index("a #10")])
            counted(teacher, 2)
            teacher.click("#class-show")
            for page in (teacher, learner):
                wait_until(page, "document.getElementById('class-stage').dataset.phase === 'shown'")
                assert bars(page.locator("#class-stage")) == Counter({"a #7": 1, "a #10": 1})
            teacher.click("#class-reveal")
            state = revealed(server, code)
            assert state["answer"]["label"] == labels[answer]
            line = learner.locator('#class-question [data-field="reveal"]')
            wait_until(learner, "document.querySelector('#class-question [data-field=\"reveal\"]')")
            assert f"The answer: “{labels[answer]}”" in line.text_content()
            rows = [row for row in answers_csv(server, started) if row["row"] == "learner"]
            assert sorted(row["round 1"] for row in rows) == ["a #10", "a #7"]
            assert {row["answer"] for row in rows} == {labels[answer]}
        finally:
            others.close()
        assert errors == []
    finally:
        if started is not None:
            end_class(server, started)
        learner.context.close()
        teacher.context.close()
