"""The class's rules on its store: per-address counts slide (at most the bound in any window, across a
clock's minute or hour boundary too: a fixed window let one address join twice the bound around it), and a
choice that ties the answer counts right, in the score and in what every screen is told."""

import csv
import io

import pytest

from app.classroom import classes as classes_module
from app.classroom.answers import answers_csv
from app.classroom.backends import MemoryBackend
from app.classroom.classes import Classes
from app.classroom.errors import ClassLimit, WrongPhase
from app.classroom.store import ClassLimits
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
        learners = [(await classes.join(code, voter, "")).learner for voter in voters]
        asked = await classes.rounds.ask(code, question, {"layer": 0}, None, None)
        for learner, voter, choice in zip(learners, voters, [0, 1, 2], strict=True):
            await classes.vote(code, learner, voter, asked.id, 1, choice)
        revealed = await classes.rounds.reveal(code)
        scores = [await classes.score(code, learner, voter) for learner, voter in zip(learners, voters, strict=True)]
        return revealed, scores

    revealed, scores = run_async(run())
    assert revealed.answer.choice == 1 and revealed.answer.right == [1, 2]
    assert revealed.correct == [2 / 3, None]
    assert [score["right"] for score in scores] == [0, 1, 1]


PRE_POST = Question("head", "Which head?", (Choice("head 0", 0.1), Choice("head 1", 0.7), Choice("head 2", 0.2)))


async def learners_of(classes: Classes, code: str, count: int) -> list[tuple[str, Client]]:
    voters = [Client(f"10.0.2.{n}", cookie=f"tester{n}") for n in range(count)]
    return [((await classes.join(code, voter, "")).learner, voter) for voter in voters]


async def take_test(classes: Classes, code: str, learners, test: str, choices: list[int]):
    asked = await classes.rounds.ask(code, PRE_POST, {"layer": 0}, None, None, test)
    for (learner, voter), choice in zip(learners, choices, strict=True):
        await classes.vote(code, learner, voter, asked.id, 1, choice)
    return asked


def test_a_test_has_one_round_alone_shows_nothing_and_a_pre_test_is_never_revealed(clock):
    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        learners = await learners_of(classes, code, 3)
        asked = await take_test(classes, code, learners, "pre", [1, 0, 1])
        assert asked.test == "pre" and asked.phase == "open"
        for move in (classes.rounds.show_votes, classes.rounds.again, classes.rounds.reveal):
            with pytest.raises(WrongPhase):
                await move(code)
        closed = await classes.rounds.close_test(code)
        # Nothing of the pre-test on any screen: no tally, no answer, no share; the gain waits for a post-test.
        assert (closed.phase, closed.tallies, closed.answer, closed.correct) == ("closed", [], None, None)
        assert closed.votes == [3]
        assert (await classes.snapshot(code)).gain is None
        assert (await classes.score(code, *learners[0]))["gain"] is None
        with pytest.raises(WrongPhase):
            await classes.rounds.close_test(code)
        with pytest.raises(WrongPhase):
            await classes.vote(code, *learners[0], asked.id, 1, 0)  # closed
        with pytest.raises(WrongPhase):
            await classes.rounds.reveal(code)
        # A question in rounds is not closed as a test.
        await classes.rounds.ask(code, PRE_POST, {"layer": 0}, None, None)
        with pytest.raises(WrongPhase):
            await classes.rounds.close_test(code)

    run_async(run())


def test_a_closed_pre_test_and_post_test_give_the_class_and_each_learner_their_gain(clock):
    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        learners = await learners_of(classes, code, 4)
        await take_test(classes, code, learners[:3], "pre", [1, 0, 0])  # the fourth answers no pre-test
        # Asking the post-test closes the pre-test still open: its votes count.
        await take_test(classes, code, learners, "post", [1, 1, 0, 1])
        assert (await classes.snapshot(code)).gain is None
        await classes.rounds.close_test(code)
        gain = (await classes.snapshot(code)).gain
        own = [(await classes.score(code, *learner))["gain"] for learner in learners]
        revealed = await classes.rounds.reveal(code)  # a post-test may be revealed once closed
        return gain, own, revealed, await answers_csv(classes.store, code)

    gain, own, revealed, answers = run_async(run())
    # By hand: pre 1, 0, 0 and post 1, 1, 0 for the three who took both; the fourth has no pre.
    pre, post = 1 / 3, 2 / 3
    assert gain.learners == 3 and gain.pre == pytest.approx(pre) and gain.post == pytest.approx(post)
    assert gain.gain == pytest.approx((post - pre) / (1 - pre))
    assert own[0].pre == 1 and own[0].gain is None and "undefined" in own[0].why
    assert (own[1].pre, own[1].post, own[1].gain) == (0, 1, 1)
    assert (own[2].pre, own[2].post, own[2].gain) == (0, 0, 0)
    assert own[3].pre is None and own[3].post == 1 and own[3].gain is None and "pre-test" in own[3].why
    assert revealed.phase == "revealed" and revealed.tallies == [{"1": 3, "0": 1}] and revealed.correct == [0.75, None]
    rows = list(csv.DictReader(io.StringIO(answers, newline="")))
    assert [row["test"] for row in rows if row["row"] == "question"] == ["pre", "post"]
    assert [row["gain g"] for row in rows if row["row"] == "learner gain"][1:3] == ["1.0", "0.0"]
    (whole,) = [row for row in rows if row["row"] == "class gain"]
    assert float(whole["gain g"]) == pytest.approx((post - pre) / (1 - pre), abs=1e-4)


def test_a_class_right_in_every_pre_test_answer_has_no_gain_and_says_why(clock):
    async def run():
        classes = Classes(MemoryBackend(), LIMITS)
        code, _ = await classes.start_class(Client("10.0.0.1"))
        learners = await learners_of(classes, code, 2)
        await take_test(classes, code, learners, "pre", [1, 1])
        await classes.rounds.close_test(code)
        await take_test(classes, code, learners, "post", [1, 0])
        await classes.rounds.close_test(code)
        return (await classes.snapshot(code)).gain

    gain = run_async(run())
    assert (gain.pre, gain.post, gain.gain) == (1, 0.5, None)
    assert "undefined" in gain.why and "pre = 100%" in gain.why
