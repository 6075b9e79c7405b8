"""Requests and responses of the class mode's API."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Code = Annotated[str, Field(pattern=r"^[23456789A-Z]{6}$", description="The class's join code")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClassStarted(BaseModel):
    code: str
    secret: str = Field(description="The teacher's token: send it as X-Class-Secret with every teacher action")
    join_url: str = Field(description="What learners open (the QR code says the same)")
    reachable: bool = Field(description="False when the join address is this computer's loopback only")


class ClassView(Strict):
    """The teacher's view state, as the page's URL carries it (the page checks each field when applying it)."""

    view: dict[str, Any]


class Question(Strict):
    text: str = Field(max_length=200, description="What the learners are asked, shown to them as it is")
    layer: int = Field(ge=0)
    head: int | str
    token: int = Field(ge=0)
    run_id: str = Field(max_length=64)
    choices: list[str] = Field(max_length=512, description="The tokens a learner can pick, in order")


class Reveal(Strict):
    answer: int = Field(ge=0, description="The token the question's token attends to most")
    weight: float = Field(ge=0, le=1)


class Join(Strict):
    nickname: str = Field("", max_length=40)


class Joined(BaseModel):
    learner: str


class LearnerState(Strict):
    following: bool
    nickname: str = Field("", max_length=40)


class Answer(Strict):
    question: str = Field(max_length=16)
    token: int = Field(ge=0, le=511)


class Tally(BaseModel):
    tally: dict[str, int] = Field(description="Learners per chosen token index")


class Score(BaseModel):
    score: str = Field(description="right/asked over the questions revealed since the learner joined")


class ClassSnapshot(BaseModel):
    code: str
    view: dict[str, Any] | None
    question: dict[str, Any] | None
    tally: dict[str, int]
    learners: int
    following: int
    connected: int
