"""Request and response bodies of the head atlas's router (app.web.atlas)."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.engine.spec import AtlasSpec
from app.web.schemas.common import Mask, ModelName

AtlasScores = Annotated[list[list[float]], Field(description="[layer][head]")]


class AtlasRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sentences: str | None = Field(
        None,
        max_length=256_000,
        description="The corpus, one sentence per line (empty lines left out; at most 1,000 sentences, each read "
        "up to 64 tokens); default: the corpus that ships with the lab",
        examples=["The cat sat on the mat.\nRain fell all night."],
    )
    model: ModelName = None
    repeats: int = Field(
        AtlasSpec.repeats, ge=1, le=256, description="Random-token sequences read twice, for the induction score"
    )
    repeat_length: int = Field(
        AtlasSpec.repeat_length, ge=2, le=30, description="Tokens in one copy of a repeated sequence"
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="The random tokens' generator")
    ablation_sentences: int = Field(
        AtlasSpec.ablation_sentences,
        ge=0,
        le=1000,
        description="Each head is switched off on the corpus's first this many sentences",
    )
    mask: Mask | None = Field(None, description="How the sentences are read; default: the model's own")


class AtlasStarted(BaseModel):
    atlas_id: str = Field(description="The atlas's content address: GET /api/atlas/{atlas_id} computes or serves it")
    sentences: int


class AtlasLabel(BaseModel):
    score: str
    label: str
    value: float


class AtlasExample(BaseModel):
    sentence: int = Field(description="Its index in the corpus")
    text: str
    query: int = Field(description="The query's token index, added tokens counted")
    key: int
    query_token: str = Field(description="The query's label in its sentence, as a token's `label` (the #1, the #7)")
    key_token: str = Field(description="The key's label in its sentence")
    weight: float


class AtlasResponse(BaseModel):
    atlas_id: str
    model: str
    layers: int
    heads: int
    sentences: int
    tokens: int = Field(description="Query rows the sentence scores average over")
    cut: int = Field(description="Sentences longer than max_tokens, read up to it")
    max_tokens: int
    repeats: int
    repeat_length: int
    ablation_sentences: int
    mask: Mask
    threshold: float = Field(description="A head is labelled when its strongest labelled score reaches this")
    scores: dict[str, AtlasScores] = Field(
        description="previous, induction, sink, entropy (nats), positional, self, and ablation (1 − cos of the "
        "sentence vector; absent for a model without an adapter)"
    )
    offset: list[list[int]] = Field(description="[layer][head]: the relative offset k − q of the positional score")
    labels: list[list[AtlasLabel | None]]
    examples: list[list[list[AtlasExample]]] = Field(
        description="[layer][head]: the head's strongest weights on a key the tokenizer did not add, one per "
        "sentence, strongest first (at most 5)"
    )


class AtlasSpace(BaseModel):
    method: str = Field(description="How the 2-D space is made, with its settings")
    query: list[tuple[float, float]] = Field(description="Each token's query, in corpus order")
    key: list[tuple[float, float]] = Field(description="Each token's key (translated and scaled), in corpus order")
    scale: float = Field(description="s: queries multiplied by it, keys divided by it (q·k unchanged)")
    explained: list[float] = Field(description="PCA: the share of variance each axis explains; t-SNE: none")
    sentence: list[int] = Field(description="Each token's sentence, by its index in the corpus")
    position: list[int]
    token: list[str]
    sentences: dict[int, str] = Field(description="The sentences shown, by index")
