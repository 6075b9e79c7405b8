"""Issue #45: no CSV the lab writes can make a spreadsheet run a formula. The rule (app/classroom/answers.py
csv_cell; static/js/export.js csvCell, tests/browser/test_csv_cells.py): a text cell whose first character
after any leading spaces is = + - @, a tab or a carriage return gets a ' in front; numbers stay numbers."""

import csv
import io

import pytest

from app.classroom.answers import answers_csv, csv_cell
from app.classroom.backends import MemoryBackend
from app.classroom.classes import Classes
from app.engine.questions import Choice, Question
from app.serving.gate import Client
from tests.conftest import run_async
from tests.test_class_rules import LIMITS

# (a text cell, what a spreadsheet must be given)
TEXT_CASES = [
    ("Ada", "Ada"),
    ("", ""),
    ("a=b", "a=b"),
    ("a-b", "a-b"),
    (" plain", " plain"),
    ("=SUM(A1)", "'=SUM(A1)"),
    ("+1", "'+1"),
    ("-1", "'-1"),
    ("@cmd", "'@cmd"),
    ("\t=1", "'\t=1"),
    ("\tplain", "'\tplain"),
    ("\r=1", "'\r=1"),
    ("  =1+2", "'  =1+2"),
    ("   @x", "'   @x"),
    (" -2", "' -2"),
]
NUMBER_CASES = [3, 0, -0.25, -7, 0.5]


@pytest.mark.parametrize(("text", "cell"), TEXT_CASES)
def test_a_text_cell_is_defused_when_it_starts_like_a_formula(text, cell):
    assert csv_cell(text) == cell


@pytest.mark.parametrize("number", NUMBER_CASES)
def test_a_number_stays_a_number(number):
    assert csv_cell(number) == number


def test_nothing_is_an_empty_cell():
    assert csv_cell(None) == ""


def test_the_class_answers_csv_defuses_every_text_cell():
    """Through the class's own CSV: a step title, the teacher's wording, choices and nicknames that start
    like formulas, after spaces, a tab or a carriage return."""
    question = Question("head", "Which head?", (Choice("@a", 0.5), Choice("+b", 0.25), Choice("c", 0.1)))

    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        voters = [Client(f"10.0.1.{n}", cookie=f"voter{n}") for n in range(2)]
        learners = [
            (await classes.join(code, voter, name)).learner
            for voter, name in zip(voters, ["-2 + 3", "  =1"], strict=True)
        ]
        step = {"index": 1, "title": "  =cmd|' /C calc'!A0"}
        asked = await classes.rounds.ask(code, question, {"layer": 0}, step, '\t=HYPERLINK("x")')
        for learner, voter, choice in zip(learners, voters, [0, 1], strict=True):
            await classes.vote(code, learner, voter, asked.id, 1, choice)
        await classes.rounds.reveal(code)
        return await answers_csv(classes.store, code)

    rows = list(csv.DictReader(io.StringIO(run_async(run()), newline="")))
    learners = [row for row in rows if row["learner"] in ("'-2 + 3", "'=1")]
    assert [row["learner"] for row in learners] == ["'-2 + 3", "'=1"]  # a nickname is stripped as it joins
    for row in learners:
        assert row["step title"] == "'  =cmd|' /C calc'!A0" and row["question"] == '\'\t=HYPERLINK("x")'
        assert row["answer"] == "'@a"
    assert [row["round 1"] for row in learners] == ["'@a", "'+b"]
    cells = [cell for row in rows for cell in row.values() if cell]
    assert not [cell for cell in cells if cell.lstrip(" ")[:1] in ("=", "+", "@", "\t", "\r")]
