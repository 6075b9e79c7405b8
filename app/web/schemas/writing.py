"""Request and response bodies of the writing router (app.web.writing): the knobs by transformers' own names and
meanings (GenerationConfig), each step of a writing opened."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.web.schemas.common import ModelName, ReadableText


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelName = None
    text: ReadableText = Field(description="The prompt the decoder continues", examples=["The cat sat on the mat. The"])
    max_new_tokens: int = Field(
        20, ge=1, description="New tokens at most (the lab's bound: ATTENTION_LAB_MAX_NEW_TOKENS)", examples=[10]
    )
    do_sample: bool | None = Field(
        None,
        description="Draw each token from the probabilities (true) or take the likeliest (false); default: the "
        "model's generation_config, else false",
    )
    temperature: float | None = Field(
        None, gt=0, description="The logits are divided by it before the softmax; default: the model's, else 1"
    )
    top_k: int | None = Field(
        None, ge=0, description="Only the k likeliest tokens are kept; 0: off; default: the model's, else 50"
    )
    top_p: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Only the likeliest tokens whose probabilities add up to p are kept; 1: off; default: the "
        "model's, else 1",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**64 - 1,
        description="The draws' generator's seed: the lab writes what model.generate writes after "
        "torch.manual_seed(seed); the process's own random numbers are never touched",
    )


class PromptToken(BaseModel):
    id: int
    text: str


class WritingSettings(BaseModel):
    """The knobs as model.generate used them: those left out taken from the model's generation_config."""

    do_sample: bool
    temperature: float | None
    top_k: int | None
    top_p: float | None


class Stage(BaseModel):
    name: str = Field(
        description="\"softmax\" (the raw logits'), then each of transformers' logits processors in generate's "
        'order: "temperature", "top_k", "top_p" (a knob that is off has no stage; greedy has the softmax alone), '
        "or another processor the model's generation_config switches on, by its class name"
    )
    ids: list[int] = Field(description="The 10 likeliest tokens at this stage, likeliest first")
    tokens: list[str]
    probabilities: list[float] = Field(description="Their probabilities: the softmax of this stage's scores")
    kept: int = Field(description="Tokens with a chance left at this stage")
    mass: float = Field(description="The probability the tokens kept had at the stage before (1 for the softmax)")


class Draw(BaseModel):
    how: Literal["argmax", "race"] = Field(
        description="argmax: the likeliest token (greedy). race: torch.multinomial's draw, an exponential race: "
        "every token i waits wᵢ ~ Exp(1) and arrives at wᵢ / pᵢ; the first to arrive is drawn"
    )
    token: int
    ids: list[int] = Field(description="The race's 5 earliest arrivals, first first (empty for argmax)")
    tokens: list[str]
    probabilities: list[float]
    waits: list[float]
    arrivals: list[float]


class Rows(BaseModel):
    shape: list[int] = Field(description="[layer, head, key]")
    dtype: Literal["float32"]
    data: str = Field(description="The little-endian C-order float32 array, base64")


class CachedBlock(BaseModel):
    first: int = Field(description="The position of the first token whose keys and values the block keeps")
    tokens: int
    shape: list[int] = Field(description="Of the keys, and of the values: [batch, key_value_head, token, head_dim]")
    bytes: int = Field(description="Keys and values")


class WrittenStep(BaseModel):
    index: int = Field(description="0 for the first new token")
    position: int = Field(description="Its position in the whole sequence, the prompt's tokens first")
    token: int = Field(description="The token written (its id)")
    text: str
    written: str = Field(description="The new tokens so far decoded together, this one the last")
    read: int = Field(description="Tokens this step's pass read: the whole prompt at first, then the one written last")
    reused: int = Field(description="Tokens whose keys and values the pass read from the cache instead")
    funnel: list[Stage]
    draw: Draw
    attention: Rows = Field(
        description="The row of the last token read (position − 1) over every token up to it, in every block and "
        "head, from this step's cached pass"
    )
    cache: list[CachedBlock] = Field(description="The cache of keys and values after this step, block by block")
    cache_bytes: int
    stop: Literal["eos", "max_new_tokens"] | None = Field(description="Why writing ends with this token, if it does")


class WritingHead(BaseModel):
    writing_id: str = Field(
        description="The writing's content address: GET /api/generate/{writing_id}/stream follows it"
    )
    model: str
    text: str
    prompt: list[PromptToken] = Field(description="The prompt's tokens as the model reads them")
    max_new_tokens: int
    seed: int
    settings: WritingSettings
    layers: int
    heads: int


class WritingEnd(BaseModel):
    ids: list[int] = Field(description="The new tokens' ids, as model.generate returns them after the prompt")
    tokens: list[str] = Field(description="Each new token's text")
    written: str = Field(description="The new tokens decoded together")
    stop: Literal["eos", "max_new_tokens"]


class GenerateResponse(WritingHead, WritingEnd):
    steps: list[WrittenStep]
