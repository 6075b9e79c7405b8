"""Request and response bodies of the experiments' router (app.web.experiments): attribution, patching and the
scoreboard."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.web.schemas.common import ComputedIn, ModelDtype, ModelName, PromptText, TokenPublic


class PatchedFrom(BaseModel):
    """Input B's activation put into the run's pass: one cell of POST /api/patch."""

    model_config = ConfigDict(extra="forbid")

    source: PromptText = Field(description="Input B, whose activation the run receives")
    site: Literal["resid_pre", "attention_output", "head", "ffn_output"]
    layer: int = Field(ge=0)
    head: int | None = Field(None, ge=0, description="The head site's head")
    positions: list[int] = Field(min_length=1, max_length=4096, description="The run's positions that receive")
    sources: list[int] = Field(min_length=1, max_length=4096, description="B's positions they take from, pairwise")


class AttributionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: PromptText
    target: Literal["similarity", "next_token"] = Field(
        "similarity",
        description="similarity: the cosine of the text's sentence vector with `other`'s; next_token: the LM head's "
        "logit of `next_token` after the text (a model with an LM head)",
    )
    other: PromptText | None = Field(None, description="The second sentence, for the similarity target")
    next_token: int | None = Field(
        None, ge=0, description="A vocabulary id; default: the model's most likely next token"
    )
    method: Literal["integrated_gradients", "gradient_x_input"] = "integrated_gradients"
    steps: int = Field(32, ge=2, le=256, description="Integrated Gradients' interpolation steps")
    model: ModelName = None


class AttributionTarget(BaseModel):
    kind: Literal["similarity", "next_token"]
    other: str | None = None
    token_id: int | None = Field(None, description="next_token: the token whose logit is attributed")
    token: str | None = None
    position: int | None = Field(None, description="next_token: the position the LM head reads (the last)")


class AttributionResponse(BaseModel):
    method: str
    computed_in: ComputedIn
    model_dtype: ModelDtype
    tokens: list[TokenPublic] = Field(description="The text's tokens, as the model's pooling reads them")
    attributions: list[float] = Field(description="Per token: the attribution summed over embedding dimensions")
    target: AttributionTarget
    output: float = Field(description="The target at the input: the cosine, or the next token's logit")
    baseline_output: float = Field(description="The target with every word-embedding row zero")
    delta: float | None = Field(description="Integrated Gradients: Σ attributions − (output − baseline_output)")


class PatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: PromptText = Field(description="Input A: the run that receives the patch")
    source: PromptText = Field(description="Input B: the run the patched activation comes from")
    site: Literal["resid_pre", "attention_output", "head", "ffn_output"] = Field(
        description="resid_pre: the residual stream a block reads; attention_output: concat(heads) · W_O; head: one "
        "head's context, its slice of W_O's input; ffn_output: the FFN's output projection"
    )
    layer: int | None = Field(None, ge=0, description="The block; none in a sweep")
    head: int | None = Field(None, ge=0, description="The head, for the head site outside a sweep over heads")
    position: int | None = Field(
        None, ge=0, description="A's position to patch; none: every position (with a partner in B)"
    )
    sweep: Literal["blocks_positions", "blocks_heads"] | None = Field(
        None, description="Every block × position (one position per cell), or every block × head (the head site)"
    )
    align: Literal["start", "end"] | None = Field(
        None,
        description="How positions pair when A and B have different lengths: from the start, or from the end (the "
        "last tokens together); required then, and a 422 shows both token lists without it",
    )
    target_tokens: list[int] | None = Field(
        None,
        description="A decoder's target after A's last token: two ids, the first's logit minus the second's; one id, "
        "its probability. Default: B's most likely next token's logit minus that of A's most likely other token",
    )
    model: ModelName = None


class PatchTarget(BaseModel):
    kind: Literal["cosine", "logit_difference", "probability"]
    token_ids: list[int] | None = None
    tokens: list[str] | None = None


class PatchEffect(BaseModel):
    value: float = Field(
        description="cosine: the sentence vector's cosine with B's; logit_difference or probability: the target "
        "after A's last token"
    )
    to_a: float | None = Field(None, description="cosine: the sentence vector's cosine with A's own")


class PatchCell(PatchEffect):
    site: str
    layer: int
    head: int | None
    positions: list[int] = Field(description="A's positions that received B's values")
    sources: list[int] = Field(description="B's positions they came from, pairwise")


class PatchResponse(BaseModel):
    computed_in: ComputedIn
    model_dtype: ModelDtype
    a_tokens: list[TokenPublic]
    b_tokens: list[TokenPublic]
    align: str | None
    target: PatchTarget
    a: PatchEffect = Field(description="A unpatched")
    b: PatchEffect = Field(description="B unpatched")
    cells: list[PatchCell] = Field(description="One per patch: block by block, then position or head")


class ScoreboardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: PromptText = Field(description="The text whose heads are scored")
    query: int | None = Field(
        None, ge=0, description="The query token whose keys are ranked; none: every query, averaged"
    )
    other: PromptText | None = Field(
        None,
        description="An encoder's output F is its sentence vector's cosine with this sentence's (required for an "
        "encoder, none for a decoder, whose F is the logit of its most likely next token)",
    )
    model: ModelName = None


class ScoreboardTarget(BaseModel):
    kind: Literal["similarity", "next_token"]
    other: str | None = None
    token_id: int | None = None
    token: str | None = None
    value: float = Field(description="F at the text, unchanged")


class ScoreboardHead(BaseModel):
    layer: int
    head: int
    values: dict[str, list[float]] = Field(
        description="Per account (weights, norm, alti, gradient) and the intervention: one value per key of `keys`"
    )
    correlations: dict[str, float | None] = Field(
        description="Spearman's ρ over the keys between two accounts, keyed 'a:b' (null where one is constant)"
    )
    agreement: dict[str, float | None] = Field(
        description="Per account: Spearman's ρ with the intervention over the keys (null where one is constant)"
    )
    float64: list[int] = Field(
        description="The keys (positions in `keys`) whose intervention was under float32's resolution of F and was "
        "run again in float64: their effects are the float64 ones"
    )


class ScoreboardResolution(BaseModel):
    least_float32_effect: float = Field(
        description="roundings·|F|·ε₃₂: an effect under it is what a float32 pass cannot tell from rounding"
    )
    roundings: int = Field(description="The factor over |F|·ε₃₂ (ε₃₂ = 2⁻²³)")
    float64: int = Field(description="How many removals were run again in float64")
    removals: int = Field(description="How many removals there were, every head's keys")
    method: str = Field(description="What is done below the resolution, in one line")


class ScoreboardResponse(BaseModel):
    run_id: str = Field(
        description="The text's run: its weights, norm and ALTI are this run's (a bfloat16 or float16 run's upcast)"
    )
    computed_in: ComputedIn = Field(
        description="What F, its gradient and the removals computed in: float32 (a bfloat16 or float16 model's "
        "float32 copy of its own weights, from that copy's pass of the text), and float64 below the resolution"
    )
    model_dtype: ModelDtype
    tokens: list[TokenPublic]
    query: int | None
    keys: list[int] = Field(description="The keys ranked: those the query can see, or every key")
    target: ScoreboardTarget
    accounts: list[str]
    pairs: list[str] = Field(description="The keys of each head's correlations, in order")
    gradient: str = Field(description="The gradient account in one line")
    intervention: str = Field(description="The intervention in one line")
    resolution: ScoreboardResolution = Field(description="Where the intervention's float32 effects are rounding")
    heads: list[ScoreboardHead] = Field(description="Block by block, head by head")
