"""Requests, responses and events of the class mode's API (docs/api.md's "Class endpoints", README "A
class")."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.engine.measures import Measure
from app.engine.questions import CrossMeasure, Pattern, Segments, Sinks
from app.web.schemas.writing import GenerateRequest

Code = Annotated[str, Field(pattern=r"^[23456789A-Z]{6}$", description="The class's join code")]
Phase = Literal["open", "shown", "closed", "revealed"]
Test = Literal["pre", "post"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClassStart(Strict):
    """How a class starts (the request's body may be left out: a class with nicknames)."""

    anonymous: bool = Field(
        False,
        description='Answers without names: the CSV numbers learners ("learner 1", …) and no nickname is kept',
    )


class ClassStarted(BaseModel):
    code: str
    secret: str = Field(description="The teacher's token: send it as X-Class-Secret with every teacher action")
    join_url: str = Field(description="What learners open (the QR code says the same)")
    reachable: bool = Field(description="False when the join address is this computer's loopback only")
    anonymous: bool


class ClassView(Strict):
    """The teacher's view state, as the page's URL carries it (the page checks each field when applying it)."""

    view: dict[str, Any]


class Step(Strict):
    """Where a question sits in a lesson plan: its step's place and title (the answers' CSV groups by it)."""

    index: int = Field(ge=0, le=10_000)
    title: str = Field("", max_length=200)


class Asked(Strict):
    step: Step | None = None
    text: str | None = Field(None, max_length=300, description="The question's wording; by default the server's")
    test: Test | None = Field(
        None, description="A pre-test or a post-test: one round, answered alone, its votes never shown; null: rounds"
    )


class Ask(Asked):
    run_id: str = Field(max_length=64, description="The run the question is about (its numbers give the answer)")


class AttendsAsk(Ask):
    """Which token does token `token` attend to most in this view?"""

    kind: Literal["attends"]
    token: int = Field(ge=0)
    layer: int = Field(0, ge=0, description="Ignored under block_mean")
    head: Annotated[int, Field(ge=0)] | Literal["mean"] = Field(
        0, description='A head, or "mean" of `heads`; ALTI has one'
    )
    heads: list[Annotated[int, Field(ge=0)]] = Field([], max_length=1024)
    block_mean: bool = False
    measure: Measure = "weights"
    sinks: Sinks = "show"
    segments: Segments = "all"


class CrossAttendsAsk(Ask):
    """Which source token does target token `token` read most in an encoder-decoder's cross-attention? The run is an
    encoder-decoder's (POST /api/analyze with a source and a target); `token` is the decoder's row, as its page
    selects it: row i reads target token i and chooses token i + 1."""

    kind: Literal["cross_attends"]
    token: int = Field(ge=0, description="The target token, by its place in what the decoder reads (0: its start)")
    layer: int = Field(0, ge=0, description="The decoder's block; ignored under block_mean")
    head: Annotated[int, Field(ge=0)] | Literal["mean"] = Field(0, description='A head, or "mean" of `heads`')
    heads: list[Annotated[int, Field(ge=0)]] = Field([], max_length=1024)
    block_mean: bool = False
    measure: CrossMeasure = "weights"
    sinks: Sinks = Field(
        "show",
        description="The source's added tokens (its end token): shown, hidden, or hidden "
        "and the rest rescaled to sum to 1",
    )


class HeadAsk(Ask):
    """Which head of block `layer` attends most to the pattern?"""

    kind: Literal["head"]
    layer: int = Field(ge=0)
    pattern: Pattern


class NextTokenAsk(Ask):
    """Which token does the language-model head write after token `token`? (a model with an LM head)"""

    kind: Literal["next_token"]
    token: int = Field(ge=0)


class PatchAsk(Ask):
    """Which head of block `layer` (by="head"), or which of the run's positions (by="position"), moves the run's
    output furthest towards B's when its activation there is taken from B (POST /api/patch)? The run is input
    A: a text read alone with the model's own mask, no heads switched off, not patched itself."""

    kind: Literal["patch"]
    source: str = Field(min_length=1, max_length=2_000, description="Input B, the source of the patches")
    layer: int = Field(ge=0)
    by: Literal["head", "position"]
    token: int | None = Field(None, ge=0, description="by=head: the position patched; none: every position")
    align: Literal["start", "end"] = Field("start", description="How positions pair when A and B differ in length")


class SearchAsk(Ask):
    """Which document of an index (POST /api/search/index) comes first for the query? The run is the query's: its
    text, read with the model's prompt it was run with (and the typed prefix); the answer is the first of the
    exact ranking by cosine among the choices."""

    kind: Literal["search"]
    index_id: str = Field(max_length=64)
    prefix: str = Field("", max_length=200, description='Typed before the query and read as its text: "query: "')
    documents: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=2, max_length=6, description="The choices, by line; default: the exact ranking's first `count`"
    )
    count: int = Field(4, ge=2, le=6, description="How many of the ranking's first documents to offer")


class TrainingAsk(Strict):
    """A question about a training the lab grows (POST /api/train), asked before what it asks about has happened
    and answered at the reveal from the training's status then; never a test."""

    train_id: str | None = Field(
        None, pattern=r"^[a-z2-7]{26}$", description="The training; none: the induction recipe's ({}), started or not"
    )
    step: Step | None = None
    text: str | None = Field(None, max_length=300, description="The question's wording; by default the server's")


class GrownHeadAsk(TrainingAsk):
    """Which head of a training the lab grows will become its induction head? Asked before its induction head
    forms, answered from the training's latest checkpoint."""

    kind: Literal["grown_head"]


class LossDropAsk(TrainingAsk):
    """When will the loss of a training the lab grows drop? Its choices are ranges of its steps; asked before its
    phase change, answered by the range holding the step its measures mark as the phase change."""

    kind: Literal["loss_drop"]


class WrittenAsk(Asked):
    """Which token comes next at step `index` of a writing? The choices are that step's likeliest candidates, their
    values the probabilities it was drawn from (its funnel's last stage)."""

    kind: Literal["written"]
    writing: GenerateRequest = Field(description="The writing, as POST /api/generate takes it")
    index: int = Field(ge=0, description="The step asked about: 0 for the first token written")


class TemperatureAsk(Asked):
    """With which temperature is the `rank`th likeliest token at step `index` of a writing likelier? The choices are
    the temperatures, their values its probability at each (transformers' TemperatureLogitsWarper on the step's
    logits)."""

    kind: Literal["temperature"]
    writing: GenerateRequest = Field(description="The writing, as POST /api/generate takes it")
    index: int = Field(ge=0, description="The step asked about: 0 for the first token written")
    rank: int = Field(1, ge=0, le=9, description="Which of the step's candidates, by the raw softmax: 0 the likeliest")
    temperatures: list[Annotated[float, Field(gt=0, le=100)]] = Field(
        [0.2, 1.5], min_length=2, max_length=4, description="The temperatures offered"
    )


QuestionAsk = Annotated[
    AttendsAsk
    | CrossAttendsAsk
    | HeadAsk
    | NextTokenAsk
    | PatchAsk
    | SearchAsk
    | GrownHeadAsk
    | LossDropAsk
    | WrittenAsk
    | TemperatureAsk,
    Field(discriminator="kind"),
]


class MeasureInfo(BaseModel):
    key: str
    symbol: str
    name: str


class Choice(BaseModel):
    index: int
    label: str = Field(description='A token\'s text, with its position where it repeats ("bank #2"), or "head 7"')
    token: int | None = None
    head: int | None = None
    document: int | None = Field(None, description="A search question's document, by its line in the index")


class Answer(BaseModel):
    choice: int
    label: str
    value: float = Field(description="The answer's exact number: its weight in the view, its share, its probability")
    right: list[int] = Field(description="Every choice counted right: the answer and any choice whose value ties it")


class QuestionState(BaseModel):
    """What every screen shows of a question: never the answer, nor a tally of a round still open."""

    id: str
    kind: Literal[
        "attends",
        "cross_attends",
        "head",
        "next_token",
        "patch",
        "search",
        "grown_head",
        "loss_drop",
        "written",
        "temperature",
    ]
    test: Test | None = Field(description="A pre-test or a post-test (one round, closed without its votes shown)")
    text: str
    step: Step | None
    view: dict[str, Any] = Field(description="What was asked about: the ask's fields but kind, step, text and test")
    measure: MeasureInfo | None
    choices: list[Choice]
    phase: Phase
    round: Literal[1, 2]
    votes: list[int] = Field(description="Votes cast in each round so far")
    tallies: list[dict[str, int]] = Field(
        description="Per closed round: votes by choice index (as text); a test's only once it is revealed"
    )
    answer: Answer | None = Field(description="Once revealed")
    values: list[float] | None = Field(
        None, description="Once revealed: every choice's number, in the choices' order (a search question's ranking)"
    )
    ranks: list[int] | None = Field(
        None,
        description="Once revealed, a search question's: each choice's place in the whole index's exact ranking by "
        "cosine (1: first of every document), in the choices' order",
    )
    ranked: int | None = Field(None, description="A search question's: how many documents its index ranks")
    words: str | None = Field(
        None, description="A written question's: the prompt and the tokens written before its step, for every screen"
    )
    drawn: int | None = Field(
        None,
        description="Once revealed, a written question's: the choice the writing drew (sampling may draw another "
        "than the likeliest), null where it drew none of them",
    )
    correct: list[float | None] | None = Field(
        description="Once revealed: the share of each round's votes that were right (null: no votes, no round 2)"
    )


class Gain(BaseModel):
    """What a pre-test and a post-test measured: the share right in each (a learner's: of the test questions it
    answered; the class's: the mean of its learners' who answered both) and Hake's normalised gain
    g = (post − pre) / (1 − pre), undefined when pre = 1 (nothing left to gain)."""

    pre: float | None
    post: float | None
    gain: float | None
    why: str | None = Field(description="Why there is no gain, in a sentence (pre = 1, or a test not answered)")


class ClassGain(Gain):
    learners: int = Field(description="Who answered a pre-test and a post-test: the class's numbers are theirs")


class Presence(BaseModel):
    learners: int
    following: int
    connected: int = Field(description="Learners' event streams open now (the teacher's not counted)")


class ClassSnapshot(Presence):
    code: str
    anonymous: bool = Field(description="The class takes no nicknames: its CSV numbers learners")
    view: dict[str, Any] | None
    question: QuestionState | None
    gain: ClassGain | None = Field(description="Once a pre-test and a post-test are closed")


class Join(Strict):
    nickname: str = Field("", max_length=40, description="Dropped unread in an anonymous class")


class Joined(BaseModel):
    learner: str
    rejoined: bool = Field(description="True when this browser had joined already: its learner is given back")
    anonymous: bool = Field(description="The class kept no nickname: its CSV numbers this learner")


class LearnerState(Strict):
    following: bool
    nickname: str = Field("", max_length=40, description="Dropped unread in an anonymous class")


class Vote(Strict):
    question: str = Field(max_length=16)
    round: Literal[1, 2]
    choice: int = Field(description="The index of one of the question's choices")


class VoteTaken(BaseModel):
    question: str
    round: int
    choice: int


class Score(BaseModel):
    """Questions revealed since the learner joined, and how many it got right (its round-2 vote where it
    voted in round 2, else its round-1 vote; a tie with the answer's value counts as right)."""

    right: int
    asked: int
    gain: Gain | None = Field(description="The learner's own, once the class has closed a pre-test and a post-test")


# Events (Server-Sent Events' data), by event name.


class ViewEvent(BaseModel):
    view: dict[str, Any]


class QuestionEvent(BaseModel):
    question: QuestionState


class VotesEvent(BaseModel):
    question: str
    round: int
    votes: list[int]


class GainEvent(BaseModel):
    gain: ClassGain


class EndEvent(BaseModel):
    reason: str
