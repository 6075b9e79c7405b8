"""Request and response bodies of the runs' router (app.web.api): analyze, the views of a run, the model and health."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.engine.measures import Measure
from app.web.encoding import AttentionDtype
from app.web.schemas.common import Mask, Matrix, ModelName, Pooling, PromptText, ReadableText, TokenPublic
from app.web.schemas.experiments import PatchedFrom


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
    target: ReadableText | None = Field(
        None,
        description="For an encoder-decoder (T5, BART, Marian; GET /api/model's `kind`): the target read with `text` "
        "(the source). Left out, the model writes it greedily (max_new_tokens). Refused (422) for an encoder or a "
        "decoder, which read one text",
        examples=["le chat"],
    )
    max_new_tokens: int | None = Field(
        None,
        description="For an encoder-decoder given no target: the most tokens it writes (1 to its max_new_tokens; "
        "default 32)",
    )
    attention: AttentionRequest | None = Field(
        None,
        description="Attention matrices to answer with, as GET /api/runs/{run_id}/attention takes them (e.g. "
        '{"dtype": "float32", "layer": 0, "head": 0} for the first heatmap): the first view comes with the '
        "analysis, in one round trip",
    )


ModelKind = Literal["encoder", "decoder", "encoder-decoder"]


class ServedModel(BaseModel):
    name: str
    kind: ModelKind | None = Field(
        description="encoder (one text, both ways), decoder (one text, causally) or encoder-decoder (a source and a "
        "target: POST /api/analyze takes `target`); null for a grown model not read yet in this worker"
    )
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
    kind: ModelKind = Field(
        description="encoder, decoder, or encoder-decoder: a source and a target, and three kinds of attention (the "
        "encoder's, the decoder's, and cross-attention from the target to the source)"
    )
    decoder_layers: int | None = Field(
        None, description="An encoder-decoder's decoder blocks (`layers`: its encoder's)"
    )
    attention_kinds: list[Literal["encoder", "decoder", "cross"]] | None = Field(
        None, description="An encoder-decoder's kinds of attention, as its runs name them"
    )
    max_new_tokens: int | None = Field(None, description="An encoder-decoder's bound on a written target's tokens")
    not_measured: dict[str, str] | None = Field(
        None, description="An encoder-decoder's measures not computed beyond the weights, each with why"
    )
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
    cannot_write: str | None = Field(
        description="Why the model cannot continue a text (POST /api/generate answers 422 with it), and how to serve "
        "one that can; null for a model that writes"
    )
    logit_softcapping: float | None = Field(
        description="c where the LM head's logits are soft-capped, c·tanh(logit/c) (Gemma's final_logit_softcapping)"
    )
    pair_layout: str = Field(description='How the tokenizer lays out a pair, e.g. "[CLS] A [SEP] B [SEP]"')
    activations: dict[str, str] = Field(
        description="What each recorded embedding and block activation is, as a formula, by its field name"
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
