"""The class's rules on its store: per-address counts slide (at most the bound in any window, across a
clock's minute or hour boundary too: a fixed window let one address join twice the bound around it), and a
choice that ties the answer counts right, in the score and in what every screen is told."""

import pytest

from app.classroom import classes as classes_module
from app.classroom.backends import MemoryBackend
from app.classroom.classes import Classes, ClassLimit, ClassLimits
from app.engine.questions import Choice, Question
from app.serving.gate import Client
from tests.conftest import run_async

LIMITS = ClassLimits(
    ttl_seconds=3600,
    max_classes=100,
    max_learners=500,
    actions_per_second=100,
    classes_per_client=50,
    starts_per_hour=4,
    joins_per_minute=5,
    learner_actions_per_second=100,
    teacher_away_seconds=600,
    streams_per_browser=3,
    streams_per_address=8,
)


class Clock:
    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(1_000_000 * 3600 + 3600 - 5)  # five seconds before an hour, and a minute, ends
    monkeypatch.setattr(classes_module.time, "time", clock.time)
    return clock


def joins_at(clock: Clock, moments: list[float]) -> list[bool]:
    """Whether each of one address's new learners joined, each at its moment (seconds from the clock's start)."""

    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        start, joined = clock.now, []
        for n, moment in enumerate(moments):
            clock.now = start + moment
            try:
                await classes.join(code, Client("10.0.0.2", cookie=f"browser{n}"), "")
                joined.append(True)
            except ClassLimit:
                joined.append(False)
        return joined

    return run_async(run())


def test_joins_across_a_minute_boundary_stay_within_the_bound(clock):
    # Five just before the minute ends, then a flood every tenth of a second for ten seconds after it.
    moments = [0, 1, 2, 3, 4] + [5 + n / 10 for n in range(100)]
    joined = joins_at(clock, moments)
    assert joined[:5] == [True] * 5
    assert not any(joined[5:])


def test_refused_joins_are_given_back_and_the_bound_returns_as_the_window_slides(clock):
    moments = [0, 1, 2, 3, 4, 4.5] + [20, 20.5, 70, 70.1, 70.2, 70.3, 70.4, 70.5]
    joined = joins_at(clock, moments)
    # The sixth is refused. A quarter into the next minute, three quarters of the last minute's five still
    # count: one more joins. In the minute after, only part of that one counts: four join, not five.
    assert joined[:6] == [True] * 5 + [False]
    assert joined[6] and not joined[7]
    assert joined[8:] == [True] * 4 + [False] * 2


def test_class_starts_across_an_hour_boundary_stay_within_the_bound(clock):
    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        started = []
        for moment in [0, 1, 2, 3, 6, 60, 600]:
            clock.now = start + moment
            try:
                await classes.start_class(Client("10.0.0.1"))
                started.append(True)
            except ClassLimit:
                started.append(False)
        return started

    start = clock.now
    assert run_async(run()) == [True] * 4 + [False] * 3


def test_a_choice_that_ties_the_answer_counts_right_for_the_learner_and_on_every_screen(clock):
    question = Question("head", "Which head?", (Choice("head 0", 0.25), Choice("head 1", 0.5), Choice("head 2", 0.5)))

    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        voters = [Client(f"10.0.1.{n}", cookie=f"voter{n}") for n in range(3)]
        learners = [(await classes.join(code, voter, ""))[0] for voter in voters]
        asked = await classes.ask(code, question, {"layer": 0}, None, None)
        for learner, voter, choice in zip(learners, voters, [0, 1, 2], strict=True):
            await classes.vote(code, learner, voter, asked.id, 1, choice)
        revealed = await classes.reveal(code)
        scores = [await classes.score(code, learner, voter) for learner, voter in zip(learners, voters, strict=True)]
        return revealed, scores

    revealed, scores = run_async(run())
    assert revealed.answer.choice == 1 and revealed.answer.right == [1, 2]
    assert revealed.correct == [2 / 3, None]
    assert [score["right"] for score in scores] == [0, 1, 1]
