"""Request and response bodies of the JSON API: the names here are a contract other tools rely on."""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.engine.measures import Measure
from app.engine.spec import AtlasSpec
from app.web.encoding import AttentionDtype

Matrix = list[list[float]]  # rows are tokens
Mask = Literal["bidirectional", "causal"]
# The poolings sentence-transformers has: every model offers the first four; a folder whose Pooling module
# names another offers that one too.
Pooling = Literal["mean", "cls", "max", "last", "mean_sqrt_len", "weighted_mean"]


def readable(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty or only whitespace: type something to analyze")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains an unpaired UTF-16 surrogate, which is not a character") from None
    return text


ReadableText = Annotated[str, AfterValidator(readable)]
PromptText = Annotated[
    ReadableText,
    Field(description="The prompt; truncated to the model's 512 tokens.", examples=["the river bank"]),
]


ModelName = Annotated[
    str | None, Field(None, max_length=200, description="One of /api/models; default: the lab's default model")
]


class AttentionView(BaseModel):
    """Which attention matrices an answer holds, and how they are written."""

    measure: Measure = Field(
        "weights",
        description="weights (softmax(QKᵀ/√d)); norm: ‖α f(x)‖ per head (Kobayashi et al. 2020); alti: each "
        "block's token-to-token contributions, head dimension 1 (Ferrando et al. 2022); alti_rollout: "
        "those rolled out through the blocks",
    )
    dtype: AttentionDtype = Field("uint8", description="uint8 (default, ±1/510), float16 or float32 (exact)")
    layer: int | None = Field(None, description="Only this block: shape [1, head, query, key]")
    head: int | None = Field(None, description="Only this head of `layer`: shape [1, 1, query, key]")
    size: int | None = Field(
        None, ge=1, description="Shrink each matrix to at most size×size, keeping each block's largest weight"
    )
    heads: str | None = Field(
        None,
        pattern=r"^\d{1,4}(,\d{1,4})*$",
        description="Average these heads (e.g. 0,3,7) of each block: shape [block, 1, query, key]",
    )
    blocks: Literal["mean"] | None = Field(
        None, description="mean: average over every block (of `heads`, or of `head`): shape [1, 1, query, key]"
    )
    rows: str | None = Field(
        None,
        pattern=r"^\d{1,6}:\d{1,6}$",
        description="Only these query rows, start:stop (e.g. 1024:1088), exact; with `size`, pooled to at most "
        "size rows (each the largest of its bin)",
    )
    cols: str | None = Field(None, pattern=r"^\d{1,6}:\d{1,6}$", description="Only these key columns, start:stop")


class AttentionRequest(AttentionView):
    """The same, in analyze's body: a key it does not know is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class PatchedFrom(BaseModel):
    """Input B's activation put into the run's pass: one cell of POST /api/patch."""

    model_config = ConfigDict(extra="forbid")

    source: PromptText = Field(description="Input B, whose activation the run receives")
    site: Literal["resid_pre", "attention_output", "head", "ffn_output"]
    layer: int = Field(ge=0)
    head: int | None = Field(None, ge=0, description="The head site's head")
    positions: list[int] = Field(min_length=1, max_length=4096, description="The run's positions that receive")
    sources: list[int] = Field(min_length=1, max_length=4096, description="B's positions they take from, pairwise")


class AnalyzeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: PromptText
    text_pair: ReadableText | None = Field(
        None,
        description="Segment B: read with `text` as one input, [CLS] text [SEP] text_pair [SEP]; "
        "the character cap counts both texts",
        examples=["it was steep"],
    )
    mask: Mask | None = Field(
        None,
        description="bidirectional (how an encoder such as MiniLM was trained) or causal (GPT-style); default: the "
        "model's own. A decoder reads causally only.",
    )
    pooling: Pooling | None = Field(None, description="How the sentence vector is pooled; default: the model's own")
    ablate: list[tuple[int, int]] = Field(
        [], max_length=1000, description="(layer, head) pairs switched off: their context is zeroed before W_O"
    )
    model: ModelName = None
    prompt: str | None = Field(
        None,
        max_length=200,
        description="One of the model's prompts by name (GET /api/model's `prompts`), its text put before `text` "
        'as sentence-transformers puts it; default: the model\'s default prompt, if it has one; "": no prompt',
        examples=["query"],
    )
    patch: PatchedFrom | None = Field(
        None, description="A patched run: input B's activation put into the pass at one site (POST /api/patch's cell)"
    )
    attention: AttentionRequest | None = Field(
        None,
        description="Attention matrices to answer with, as GET /api/runs/{run_id}/attention takes them (e.g. "
        '{"dtype": "float32", "layer": 0, "head": 0} for the first heatmap): the first view comes with the '
        "analysis, in one round trip",
    )


class ServedModel(BaseModel):
    name: str
    loaded: bool = Field(description="Loaded in the worker that answered (a model loads on first use)")


class ModelsResponse(BaseModel):
    default: str
    models: list[ServedModel]


View = Literal["qkv", "worked_example", "ffn", "measures", "ablation", "pipeline"]


class SentenceModule(BaseModel):
    """One module of the sentence-transformers pipeline after the transformer, as the folder defines it."""

    module: Literal["Pooling", "Dense", "Normalize"]
    pooling: Pooling | None = Field(None, description="Pooling: the folder's own strategy (null: the default)")
    include_prompt: bool | None = Field(None, description="Pooling: false when it leaves the prompt's tokens out")
    shape: list[int] | None = Field(None, description="Dense: its weight, [out_features, in_features]")
    bias: bool | None = None
    activation: str | None = Field(None, description="Dense: the torch.nn activation after it")


class ModelInfo(BaseModel):
    name: str = Field(description="The folder's name, or the Hub id it was named by (org/name)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        description="What the model's weights and passes are in (ATTENTION_LAB_DTYPE): every number of its runs is "
        "the model's own in it, sent as float32, which holds a bfloat16 or float16 number exactly. In bfloat16 or "
        "float16 they are not float32's numbers: exact to the model as it ran, not to its float32 weights"
    )
    device: str = Field(description="Where its passes run (ATTENTION_LAB_DEVICE): cpu, cuda:0, …")
    attention_only: str | None = Field(
        description="Why only the attention weights are read, for a model of a family without an adapter "
        "(\"no adapter for the 'opt' family: attention weights only\"); null: every view works"
    )
    capabilities: dict[View, bool] = Field(
        description="Which views the model has: all of them with an adapter, none of these without"
    )
    layers: int
    heads: int
    hidden_size: int
    head_dim: int
    intermediate_size: int | None
    vocab_size: int
    max_tokens: int = Field(description="The model's own limit: its positions (and its tokenizer's)")
    max_input_tokens: int = Field(
        description="The most tokens a run reads here (ATTENTION_LAB_MAX_TOKENS, at most max_tokens): a longer "
        "input is cut and its run says `truncated`"
    )
    max_seq_length: int = Field(
        description="Tokens the sentence vector is pooled over (the folder's sentence-transformers max_seq_length; "
        "longer inputs are pooled from a pass over their first max_seq_length tokens, as sentence-transformers does)"
    )
    family: str = Field(description="The architecture family the lab reads the model as: BERT, RoBERTa, GPT-2, …")
    key_value_heads: int = Field(description="K/V heads (fewer than heads in grouped-query attention)")
    decoder: bool = Field(description="A causal decoder: trained to read each token with only the ones before it")
    scales: list[float | None] = Field(
        description="Each block's factor on q·k before the mask and softmax: 1/√head_dim in most models (a GPT-2 "
        "may leave it out, or divide it by the block's number too; Gemma's is 1/√query_pre_attn_scalar); null "
        "without an adapter"
    )
    windows: list[int | None] = Field(
        description="Each block's sliding window (Mistral; Qwen2's, ModernBERT's and Gemma 3's local blocks): a "
        "query sees the keys fewer than `window` positions away, before it under the causal mask, on either side "
        "under the bidirectional one. null: the block reads the whole context its mask allows"
    )
    score_notes: list[str] = Field(
        description="What the scores do besides softmax(q·k/√head_dim + mask), in sentences: q/k normalisation, "
        "rotation, another scale, local windows, no biases"
    )
    masks: list[Mask] = Field(description="The masks this model may be read with; the first is its own")
    default_mask: Mask
    poolings: list[Pooling]
    default_pooling: Pooling
    prompts: dict[str, str] = Field(
        description="config_sentence_transformers.json's prompts: name → the text put before the input"
    )
    default_prompt: str | None = Field(description="The prompt applied when a request names none")
    sentence_modules: list[SentenceModule] = Field(
        description="What makes the sentence vector after the transformer, in order (modules.json)"
    )
    normalization: Literal["post-LN", "pre-LN", "pre-RMSNorm", "pre+post-RMSNorm"] | None
    positions: Literal["absolute", "relative", "rotary"] | None
    ffn: str | None = Field(description="The FFN by its activation: GELU, ReLU, …, or for a gated one SwiGLU, GeGLU, …")
    ffn_gated: bool | None = Field(description="act(x · W_gate) ⊙ (x · W_up), then W_down; else act(x · W₁), then W₂")
    ffn_activation: str | None = Field(description="The FFN's activation: GELU (its approximations too), ReLU, SiLU, …")
    token_types: bool
    position_offset: int = Field(
        description="Positions the model reserves before the first token: token i reads position row i + this"
    )
    next_tokens: bool = Field(description="The model has a language-model head: next-token candidates per position")
    logit_softcapping: float | None = Field(
        description="c where the LM head's logits are soft-capped, c·tanh(logit/c) (Gemma's final_logit_softcapping)"
    )
    pair_layout: str = Field(description='How the tokenizer lays out a pair, e.g. "[CLS] A [SEP] B [SEP]"')
    activations: dict[str, str] = Field(
        description="What each recorded embedding and block activation is, as a formula, by its field name"
    )


class TokenPublic(BaseModel):
    index: int
    text: str = Field(
        description="The subword piece: WordPiece's own (`##` marks a continuation), or the text a byte-level or "
        'SentencePiece piece stands for (" cat")'
    )
    label: str = Field(
        description="How the lab names the token everywhere: its text (a byte-level piece's leading space left out, "
        '"␣" for a blank one), and its index where the same text appears more than once in the run ("a #1", '
        '"a #4")',
        examples=["a #4"],
    )
    id: int = Field(description="Row of the embedding table this token reads")
    special: bool = Field(description="Any of the tokenizer's special ids, typed ones and [UNK] included")
    added: bool = Field(
        description="Put in by the tokenizer around the text ([CLS], [SEP], <s>, </s>), not read from it: "
        "the tokens the page's sink controls hide"
    )
    start: int = Field(
        description="Offset in Unicode code points into the token's segment: `text` for A, `text_pair` for B; "
        "[CLS]/[SEP] have 0, 0"
    )
    end: int
    token_type: int = Field(description="The token type id the model received (BERT: 0 in segment A, 1 in B)")
    segment: Literal["A", "B"] = Field(
        description="Which text the token comes from; [CLS] and the first [SEP] are A, the last [SEP] is B"
    )
    prompt: bool = Field(
        False, description="Read from the model's prompt put before the text (its offsets index the prompt)"
    )


class SentenceStage(BaseModel):
    module: Literal["Pooling", "Dense", "Normalize"]
    title: str = Field(description='What it does, e.g. "mean pooling", "Dense 768 → 3072", "L2 normalisation"')
    vector: list[float]
    norm: float


class Pooled(BaseModel):
    strategy: Pooling
    tokens: int = Field(description="How many tokens the vector is pooled over")
    vector: list[float] = Field(description="The pooling's vector")
    norm: float
    normalized: list[float] = Field(description="The pooling's vector divided by its norm")
    stages: list[SentenceStage] | None = Field(
        None,
        description="The vector after each module of the model's sentence-transformers pipeline, the pooling "
        "first, in order",
    )
    embedding: list[float] | None = Field(
        None, description="The last stage's vector: the model's sentence vector, what sentence-transformers encodes"
    )


class AnalyzeResponse(BaseModel):
    run_id: str
    model: ModelInfo
    text_pair: str | None = Field(description="Segment B as sent; null when the text was read alone")
    tokens: list[TokenPublic]
    truncated: bool
    mask: Mask
    pooling: Pooling = Field(description="How this run's sentence vector is pooled")
    prompt: str | None = Field(description="The model's prompt put before the text, by name; null: none")
    pooled: Pooled | None = Field(
        description="The sentence vector; null for an input longer than the model's max_seq_length until its "
        "vector is asked for (a pass of its own over the cut input): GET /api/runs/{run_id}/pooled"
    )
    ablated: list[tuple[int, int]] = Field(description="(layer, head) pairs switched off in this run")
    patch: PatchedFrom | None = Field(None, description="Input B's activation put into this run's pass, if any")
    attention: "EmbeddedAttention | None" = Field(
        description="The attention matrices the request asked for; null if it asked for none, or for more than 1 MiB "
        "(GET /api/runs/{run_id}/attention sends those)"
    )


class EmbeddedAttention(BaseModel):
    """What GET /api/runs/{run_id}/attention sends, in JSON: its headers' numbers and the body in base64."""

    shape: list[int] = Field(description="X-Attention-Shape: [layer, head, query, key]")
    dtype: AttentionDtype
    scale: float | None = Field(description="uint8 only: value = byte / scale")
    measure: Measure
    window: list[int] = Field(
        description="X-Attention-Window: the query rows and key columns held, [start, stop, start, stop]"
    )
    pooling: Literal["max"] | None = Field(description="X-Attention-Pooling: max where cells are pooled bins")
    computed_in: Literal["float32", "bfloat16", "float16"] = Field(
        description="X-Attention-Computed-In: the weights in the model's own dtype; every other measure in "
        "float32 (or more), from a bfloat16 or float16 model's numbers upcast"
    )
    data: str = Field(description="The little-endian C-order array, base64")


class CompareResponse(BaseModel):
    """One token's vector in two runs, stage by stage (cosine), and how the two runs' attention differs."""

    a: str
    b: str
    token_a: int
    token_b: int
    same_id: bool
    stages: list[str]
    cosines: list[float]
    pooled_cosine: float
    attention_change: list[float] | None = Field(description="Per block, mean |A_a − A_b|; null if N differs")


class HeadStat(BaseModel):
    layer: int
    head: int
    entropy: float = Field(description="Mean over query rows of −Σ A log A, in nats")
    cls: float = Field(description="Mean share of a query's attention on the token the tokenizer put first ([CLS])")
    sep: float = Field(description="Mean share on the tokens the tokenizer put at the ends of segments ([SEP])")
    self: float
    previous: float
    next: float
    period: float = Field(description='Mean share on "." tokens (0 where there are none)')
    label: str | None = Field(description="What the head does, only where its share passes the threshold")


class AddedNames(BaseModel):
    cls: str = Field(description='The added token that opens the input, as written ("[CLS]"); empty if none')
    sep: str = Field(description='The added tokens that close segments ("[SEP]"); empty if none')


class HeadStatsResponse(BaseModel):
    threshold: float
    added: AddedNames
    heads: list[HeadStat]


class RolloutResponse(BaseModel):
    index: int
    rollout: list[float] = Field(description="Attention rollout row: each input token's share in this token")


class NearestRow(BaseModel):
    id: int
    token: str
    cosine: float


class NearestStage(BaseModel):
    stage: str
    rows: list[NearestRow]


class NextToken(BaseModel):
    id: int
    token: str
    logit: float
    probability: float = Field(description="softmax over the whole vocabulary")


class NextTokensResponse(BaseModel):
    index: int
    candidates: list[NextToken] = Field(description="The LM head's most likely next tokens after this one, best first")


class NearestResponse(BaseModel):
    index: int
    stages: list[NearestStage]


class PoolingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: PromptText
    mask: Mask | None = None
    model: ModelName = None
    prefix: str = Field("query: ", max_length=200, description="An instruction prefix to compare with")
    prompt: str | None = Field(
        None, max_length=200, description="One of the model's prompts by name: compared with in place of `prefix`"
    )


class PrefixShift(BaseModel):
    text: str
    run_id: str
    cosine: float = Field(
        description="Cosine between the sentence vectors (the model's whole pipeline) with and without the prefix"
    )


class WholeInputPooled(Pooled):
    cosine: float = Field(description="Cosine with the model's own sentence vector (pooled over max_seq_length)")


class PoolingResponse(BaseModel):
    run_id: str
    strategies: dict[Pooling, Pooled]
    whole_input: WholeInputPooled = Field(
        description="The run's pooling over every token it read: beyond max_seq_length, not the model's own vector"
    )
    cosines: dict[str, float]
    prefix: PrefixShift


class HeadResponse(BaseModel):
    layer: int
    head: int
    q: Matrix = Field(description="[pos, head_dim]")
    k: Matrix
    v: Matrix
    scores: Matrix = Field(description="QKᵀ/√d + mask, before softmax: [query_pos, key_pos]")
    weights: Matrix = Field(description="softmax(scores): [query_pos, key_pos]")
    context: Matrix = Field(description="weights · V: [pos, head_dim], what the head computes, switched off or not")
    context_to_output: Matrix = Field(description="What W_O receives from this head: the context, or zeros if ablated")
    ablated: bool = Field(description="The head is switched off in this run")


class QueryResponse(BaseModel):
    """One query token's row of one head: all the worked example needs, small even at 512 tokens."""

    layer: int
    head: int
    query: int
    q: list[float] = Field(description="[head_dim]")
    k: Matrix = Field(description="[pos, head_dim]: every key")
    v: Matrix = Field(description="[pos, head_dim]: every value")
    scores: list[float] = Field(description="[key_pos]: this query's row of QKᵀ/√d + mask")
    weights: list[float] = Field(description="[key_pos]: softmax(scores)")
    context: list[float] = Field(description="[head_dim]: weights · V")
    context_to_output: list[float] = Field(
        description="[head_dim]: what W_O receives: the context, or zeros if ablated"
    )
    ablated: bool


class LayerResponse(BaseModel):
    layer: int
    attention_output: Matrix = Field(description="concat(heads) · W_O: [pos, hidden]")
    resid_mid: Matrix = Field(
        description="The residual stream after attention: LayerNorm(x + attention_output) in a post-LN model, "
        "x + attention_output in a pre-LN one: [pos, hidden]"
    )
    ffn_intermediate: Matrix = Field(
        description="act(x · W_1), or a gated FFN's act(x W_gate) ⊙ x W_up (SwiGLU: SiLU): [pos, intermediate]"
    )
    ffn_output: Matrix = Field(description="ffn_intermediate · W_2: [pos, hidden]")
    output: Matrix = Field(description="The block's output, the residual stream after the FFN: [pos, hidden]")


class EmbeddingsResponse(BaseModel):
    """The embedding stages the model has: a rotary model has word rows only, GPT-2 no LayerNorm here."""

    word: Matrix = Field(description="Row `id` of the word-embedding table, per token: [pos, hidden]")
    position: Matrix | None = None
    token_type: Matrix | None = None
    sum: Matrix | None = Field(None, description="word + position (+ token_type)")
    normalized: Matrix | None = Field(None, description="LayerNorm(sum): the input to block 0")


class TokenEmbeddings(BaseModel):
    word: list[float]
    position: list[float] | None = None
    token_type: list[float] | None = None
    sum: list[float] | None = None
    normalized: list[float] | None = None


class TokenLayer(BaseModel):
    layer: int
    attention_output: list[float]
    resid_mid: list[float]
    ffn_intermediate: list[float]
    ffn_output: list[float]
    output: list[float]


class TokenTraceResponse(BaseModel):
    """One token's rows of the embeddings and of every block: what the page's pipeline view draws."""

    index: int
    embeddings: TokenEmbeddings
    layers: list[TokenLayer]


class StoreHealth(BaseModel):
    name: str = Field(description="Where run specs are shared: sqlite and its file, or the Redis URL")
    answering: bool
    detail: str | None = Field(description="Why it is not answering; null when it is")


class Health(BaseModel):
    status: Literal["ok"]
    model: str = Field(description="The default model")
    models: list[str] = Field(description="Every model this lab serves, the default first")
    server: str = Field(description="host:pid of the process that answered: which replica and worker")
    runs: int = Field(description="Runs this server process holds in memory")
    run_bytes: int = Field(
        description="The bytes those runs and what is computed from them keep, as the run cache counts them "
        "(each tensor once), blocks of weights computed when asked included"
    )
    store: StoreHealth


class ErrorResponse(BaseModel):
    detail: str


class ValidationErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """422: one readable sentence first, pydantic's list after it for tools."""

    detail: str
    errors: list[ValidationErrorItem] = []


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


ComputedIn = Annotated[
    Literal["float32"],
    Field(
        description="What the measure computed in: float32, on the model's own numbers upcast (exactly) where the "
        "model is bfloat16 or float16, a float32 copy of its weights held while the measure runs"
    ),
]
ModelDtype = Annotated[
    Literal["float32", "bfloat16", "float16"], Field(description="What the model's weights and passes are in")
]


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


class AtlasProgress(BaseModel):
    state: Literal["running", "done", "not running"] = Field(
        description="Of the corpus run, on any worker sharing the store ('done': this worker keeps it); a run "
        "stops when every client waiting for it has left"
    )
    done: int = Field(0, description="Padded passes done")
    total: int = Field(0, description="Padded passes in all")


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


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: str | None = Field(
        None,
        max_length=1_000_000,
        description="The corpus, one document per line (empty lines left out; at most 5,000 documents of at most "
        "2,000 characters, each read up to the model's pooling length, and the whole request within the body limit, "
        "ATTENTION_LAB_MAX_BODY_BYTES: 512 KiB by default); default: the corpus that ships with the lab",
        examples=["The bank raised its interest rate.\nWe sat on the bank of the river."],
    )
    model: ModelName = None
    prompt: str | None = Field(
        None,
        max_length=200,
        description="The model's prompt, by name, read before every document; default: its prompt for documents "
        '("document", "passage") where it names one, else its default prompt; "": none',
    )
    prefix: str = Field("", max_length=200, description='Typed before every document and read as its text: "passage: "')


class IndexStarted(BaseModel):
    index_id: str = Field(description="The index's content address: GET /api/search/index/{index_id} computes it")
    documents: int
    prompt: str | None = Field(description="The model's prompt every document is read with (resolved)")
    prefix: str


class IndexProgress(BaseModel):
    state: Literal["running", "done", "not running"] = Field(
        description="Of the index's passes, on any worker sharing the store ('done': this worker keeps it); they "
        "stop when every client waiting for the index has left"
    )
    done: int = Field(0, description="Padded passes done")
    total: int = Field(0, description="Padded passes in all")


class IndexResponse(BaseModel):
    index_id: str
    model: str
    documents: int
    size: int = Field(description="The length of a document's vector")
    tokens: int = Field(description="Tokens read, the prompt's and the added ones included")
    cut: int = Field(description="Documents longer than max_tokens, read up to it")
    max_tokens: int = Field(description="The model's pooling length: sentence-transformers' max_seq_length")
    passes: int = Field(description="Padded passes the index took")
    seconds: float = Field(description="What they took on the worker that computed them")
    prompt: str | None
    prompt_text: str = Field(description="The prompt's text as it is put before every document")
    prefix: str


class Hnsw(BaseModel):
    """The approximate index's knobs (usearch's HNSW)."""

    model_config = ConfigDict(extra="forbid")

    m: int = Field(16, ge=2, le=64, description="Links per vector in each layer of the graph (M); a rebuild")
    ef_construction: int = Field(
        128, ge=2, le=1024, description="Depth of the search that links each vector as it is added; a rebuild"
    )
    ef: int = Field(64, ge=1, le=1024, description="Depth of a query's search (at least k is searched)")


SearchText = Annotated[str, AfterValidator(readable), Field(max_length=2000, examples=["where can I borrow money"])]


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_id: str = Field(max_length=64)
    query: SearchText
    k: int = Field(10, ge=1, le=100, description="How many documents to return (at most the index's)")
    prompt: str | None = Field(
        None,
        max_length=200,
        description='The model\'s prompt, by name, read before the query; default: its "query" prompt where it has '
        'one, else its default prompt; "": none',
    )
    prefix: str = Field("", max_length=200, description='Typed before the query and read as its text: "query: "')
    hnsw: Hnsw = Hnsw()


class SearchHit(BaseModel):
    rank: int = Field(description="1 for the best")
    document: int = Field(description="Its line in the corpus, from 0")
    text: str
    score: float = Field(description="The cosine of the query's vector and the document's")


class SearchQuery(BaseModel):
    text: str = Field(description="As the model read it: the prompt's text and the typed prefix before the query")
    tokens: int
    prompt: str | None
    prefix: str
    ms: float = Field(description="Its one forward pass, pooled and normalised, on this worker")


class Approximate(BaseModel):
    hits: list[SearchHit]
    recall: float = Field(description="recall@k: the share of the exact top k the graph's top k holds")
    ms: float = Field(description="The graph's search")
    m: int
    ef_construction: int
    ef: int
    build_seconds: float = Field(description="What building the graph took on the worker that built it")


class SearchResponse(BaseModel):
    index_id: str
    k: int
    query: SearchQuery
    exact: list[SearchHit] = Field(description="The top k by cosine over every document, best first")
    exact_ms: float = Field(description="Every cosine and the sort (NumPy, float64)")
    approximate: Approximate


class PairsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_id: str = Field(max_length=64)
    query: SearchText
    documents: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, max_length=20, description="The documents to re-read with the query, by line (a top k)"
    )
    layer: int | None = Field(None, ge=0, description="The block whose A → B cells are drawn; default: the last")
    head: Annotated[int, Field(ge=0)] | Literal["mean"] = Field("mean", description='A head, or "mean" of them all')
    shown: int = Field(0, ge=0, description="Which of the documents' pairs has its cells drawn (its place)")


class Pair(BaseModel):
    document: int
    text: str
    run_id: str = Field(description="The pair as a run of the lab: query as A, document as B")
    cross_share: float = Field(
        description="The mean share of attention an A token gives the B tokens, over every block and head"
    )
    relevance: float | None = Field(description="The cross-encoder's score, where the lab has one")


class PairCells(BaseModel):
    document: int
    run_id: str
    layer: int
    head: int | Literal["mean"]
    rows: list[str] = Field(description="Segment A's tokens (the query's, [CLS] and its [SEP]), by label")
    cols: list[str] = Field(description="Segment B's tokens (the document's and the last [SEP]), by label")
    cells: Matrix = Field(description="[A token][B token]: the attention weights of the view, A → B")


class PairsResponse(BaseModel):
    layout: str = Field(description="How the model reads a pair: [CLS] A [SEP] B [SEP]")
    pairs: list[Pair] = Field(description="In the order asked")
    shown: PairCells
    pairs_ms: float = Field(
        description="The pairs read by the model in padded passes of their own, nothing kept: a cross-encoder's cost"
    )
    pair_passes: int = Field(description="The padded passes the pairs took (one input each)")
    cross_encoder: str | None = Field(description="The cross-encoder folder's name, where the lab has one")
    cross_ms: float | None = Field(description="The cross-encoder's passes over the pairs")
