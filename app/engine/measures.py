"""What attention moves, beside its weights, from a kept run's numbers and the model's own weights.

- norm (Kobayashi et al., EMNLP 2020, "Attention is Not Only a Weight"): ‖α_ij f_h(x_j)‖ with
  f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, the value vector as it leaves the head through its rows of W_O
  (the output bias left out, as in the paper). A large weight on a token whose transformed vector is
  short moves little. [layer, head, query, key]
- alti (Ferrando et al., EMNLP 2022, "Measuring the Mixing of Contextual Information in the Transformer"):
  the attention block's output for token i, after the residual (and, in a post-LN model, its LayerNorm),
  is decomposed over the input tokens, y_i = Σ_j T̃_i(x_j) + (the LayerNorm's and W_O's biases), where
  T_i(x_j) = Σ_h α_ij^h f_h(x_j) + [i = j] x_j and T̃_i(x_j) = γ ⊙ (T_i(x_j) − mean T_i(x_j)) / σ_i with
  σ_i the LayerNorm's own scale for token i (in a pre-LN model, whose norm comes before attention and
  acts on each token alone, T̃ = T and y_i = x_i + attention; in a pre+post-RMSNorm one, Gemma's, whose
  RMSNorm scales attention's output before the residual, T̃_i(x_j) = γ ⊙ Σ_h α_ij^h f_h(x_j) / σ_i + [i = j] x_j
  with σ_i that RMSNorm's scale for token i). Token j's contribution is its closeness to the output,
  c_ij = max(0, ‖y_i‖₁ − ‖y_i − T̃_i(x_j)‖₁), normalised so that Σ_j c_ij = 1 (the paper's ALTI with
  Manhattan distance; the FFN, token-wise, mixes nothing). [layer, 1, query, key]
- alti_rollout: the contributions rolled out through the blocks, R_l = C_l R_{l-1}: how much each input
  token makes up token i after block l. [layer, 1, query, key]

A switched-off head moves nothing: its f_h counts as zero, as W_O receives zeros from it.

A block of a measure is computed in slices (block_slices), each a bounded amount of work, so that a server
can give its model's turn to others between them (app.serving.lab).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from app.engine import names
from app.engine.runs import ROW_CHUNK

Measure = Literal["weights", "norm", "alti", "alti_rollout"]


@dataclass(frozen=True)
class Wording:
    """What a view's cells are called once its measure has been transformed; today one transformation, the
    page's "hide and renormalise" (sinks=renormalise), which divides each row's kept cells by their sum: the
    cells are then shares of the kept tokens' total, whatever the measure was, and the hidden tokens' column
    (the sink) is their share of the row's total before that division, so that it is in the cells' unit."""

    symbol: str
    name: str
    short: str
    values: str
    meaning: str
    sink: str  # what the sink column holds, for its header, tooltip and an export's field


def shares(symbol: str, name: str, short: str) -> Wording:
    """A measure's words under sinks=renormalise, by one rule for every measure."""
    return Wording(
        symbol=f"share of {symbol}",
        name=f"share of the kept tokens' {name}",
        short=f"{short}, renormalised" if short else "renormalised",
        values="0 to 1, a share of the row's total over the kept tokens; each row sums to 1",
        meaning=f"The {name} of token j divided by the sum of row i's {name} over the tokens kept: "
        "the special tokens hidden, a cell is its share of what is left.",
        sink="the hidden special tokens' share of the row's total before renormalising, 0 to 1",
    )


@dataclass(frozen=True)
class MeasureName:
    """What a measure's numbers are called, declared once: every label, readout, title, hint, verdict and
    export of the page (sent in its config) and every question the class is asked reads it from here."""

    key: str  # the API's `measure=`, or "difference" for one measure of two runs subtracted
    symbol: str  # a cell's value as a formula names it: "A[i,j]" for a weight
    name: str  # what one value is, in words: "attention weight"
    short: str  # in a title before the view: "norm-weighted block 3, head 7"
    values: str  # its unit or range, for a colour bar and a hint
    meaning: str  # one line a learner can read
    per_block: bool  # one picture per block, not per head
    sink: str  # what the sink column holds with the special tokens hidden (sinks=hide)
    renormalised: Wording  # its words with the special tokens hidden and each row rescaled (sinks=renormalise)


def declared(
    key: str,
    symbol: str,
    name: str,
    short: str,
    values: str,
    meaning: str,
    per_block: bool,
    renormalised: Wording | None = None,
) -> MeasureName:
    """One measure, its words with the special tokens hidden derived from its own by one rule (a difference
    of two runs states its renormalised words itself: a difference of shares is not a share)."""
    return MeasureName(
        key=key,
        symbol=symbol,
        name=name,
        short=short,
        values=values,
        meaning=meaning,
        per_block=per_block,
        sink=f"the {name} on the hidden special tokens, summed",
        renormalised=renormalised or shares(symbol, name, short),
    )


MEASURES: dict[str, MeasureName] = {
    measure.key: measure
    for measure in (
        declared(
            key="weights",
            symbol="A[i,j]",
            name="attention weight",
            short="",
            values="0 to 1; each row sums to 1",
            meaning="softmax(QKᵀ/√d): how much query token i reads key token j.",
            per_block=False,
        ),
        declared(
            key="norm",
            symbol="‖α·f(x)‖[i,j]",
            name="norm-weighted attention",
            short="norm-weighted",
            values="0 and up (a length, not a weight)",
            meaning="The weight times the length of what token j's value carries out of the head "
            "(Kobayashi et al. 2020).",
            per_block=False,
        ),
        declared(
            key="alti",
            symbol="ALTI[i,j]",
            name="ALTI contribution",
            short="ALTI",
            values="0 to 1; each row sums to 1",
            meaning="Token j's share in token i's output of the block, residual and LayerNorm included "
            "(Ferrando et al. 2022).",
            per_block=True,
        ),
        declared(
            key="alti_rollout",
            symbol="R[i,j]",
            name="ALTI rollout",
            short="ALTI rollout",
            values="0 to 1; each row sums to 1",
            meaning="ALTI's shares multiplied through the blocks: how much input token j makes up token i "
            "after this block.",
            per_block=True,
        ),
        declared(
            key="difference",
            symbol="ΔA[i,j]",
            name="difference A − B",
            short="A − B",
            values="−1 to 1",
            meaning="The same measure in two runs, the second subtracted from the first.",
            per_block=False,
            renormalised=Wording(
                symbol="Δ share[i,j]",
                name="difference A − B of the kept tokens' shares",
                short="A − B, renormalised",
                values="−1 to 1, a difference of two shares of the kept tokens' total",
                meaning="Each run's row rescaled to sum to 1 over the tokens kept, the second subtracted from "
                "the first.",
                sink="the difference A − B of the hidden special tokens' shares of the row's total before "
                "renormalising",
            ),
        ),
    )
}

QUERY_CHUNK = 32  # queries decomposed at once: [chunk, key, d_model] floats stay about 50 MB at 512 tokens
CHUNK_BYTES = 64 * 1024**2  # fewer queries at once where QUERY_CHUNK's would pass this (long inputs, wide models)
# Multiply-adds in one slice of ALTI (whole chunks of queries, at least one): one chunk of a 512-token run of
# MiniLM, a short turn at the gate (bench/README.md).
SLICE_WORK = 2**27


def worded(key: str, sinks: str = "show") -> MeasureName | Wording:
    """A measure's words as a view shows them: its own, or under sinks=renormalise its renormalised ones (the
    page's measureOf(key, sinks), static/js/measures.js)."""
    measure = MEASURES[key]
    return measure.renormalised if sinks == "renormalise" else measure


def query_chunk(n: int, d_model: int) -> int:
    """The queries ALTI decomposes at once: QUERY_CHUNK, fewer where their [chunk, key, d_model] float64
    would pass CHUNK_BYTES."""
    return max(1, min(QUERY_CHUNK, CHUNK_BYTES // (n * d_model * 8)))


def attention_output_weights(run, model, layer: int) -> tuple[Tensor, Tensor, torch.nn.LayerNorm | None]:
    """W_O [d_model, heads·d_head] and b_O of block `layer` (zeros where it has none), in float32 (a bfloat16 or
    float16 model's upcast: the measures compute in float32 or more, from the model's own numbers), and the
    LayerNorm after its residual in a post-LN model (None in a pre-norm one)."""
    family = run.family
    block = model.base_model.get_submodule(f"{family.blocks}.{layer}")
    w_o = block.get_submodule(family.attention_output)
    # A Linear keeps [out, in]; GPT-2's Conv1D keeps [in, out].
    weight = w_o.weight.detach() if isinstance(w_o, torch.nn.Linear) else w_o.weight.detach().T
    bias = w_o.bias.detach() if w_o.bias is not None else torch.zeros(len(weight))
    norm = block.get_submodule(family.post_attention_norm) if family.post_attention_norm else None
    return weight.float(), bias.float(), norm


def transformed_values(run, model, layer: int) -> Tensor:
    """f_h(x_j): each head's value vectors through its columns of W_O, in float32 (upcast from a bfloat16 or
    float16 run). [head, key, d_model]"""
    v = run.activations[names.attn(layer, "v")].float()  # [head, pos, d_head]
    w_o, _, _ = attention_output_weights(run, model, layer)
    d_head = v.shape[-1]
    per_head = w_o.unflatten(1, (run.n_heads, d_head)).permute(1, 2, 0)  # [head, d_head, d_model]
    f = v @ per_head  # [head, pos, d_model]
    for ablated_layer, head in run.spec.ablated:
        if ablated_layer == layer:
            f[head] = 0
    return f


def norm(run, model, layer: int) -> Tensor:
    """‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖. [head, query, key]"""
    weights = run.weights(layer)
    return weights * transformed_values(run, model, layer).norm(dim=-1)[:, None, :]


def alti_bytes(run, layer: int) -> int:
    """ALTI's peak memory for block `layer`, stated before it starts, from the block's shapes (n tokens, h
    heads, d_model): its contributions [query, key] in float32; what every row reads, in float64 (alti_block:
    the vectors per head and the mean's, f itself, the per-token vectors); the weights of ROW_CHUNK queries;
    and one chunk's products ([chunk, key, d_model] and the einsum's own, two of them: 323 MiB measured at
    6,813 tokens of a 4-head, 64-wide decoder, where this states 344)."""
    n, d_model = run.block_input(layer).shape
    heads = run.n_heads
    per_head = (2 * heads + 1) * n * d_model * 8
    rows = (heads + 1) * ROW_CHUNK * n * 8 * 2
    chunk = 2 * query_chunk(n, d_model) * n * d_model * 8
    return n * n * 4 + per_head + 8 * n * d_model * 8 + rows + chunk


def norm_bytes(run, layer: int) -> int:
    """The norm-weighted block's peak memory: the block of weights where it is not kept (Run.weights), the
    product of the same size, and f_h(x_j) [head, key, d_model]."""
    n, d_model = run.block_input(layer).shape
    weights = 0 if run.kept_weights(layer) is not None else run.block_bytes
    return weights + run.block_bytes + run.n_heads * n * d_model * 4 * 2


def alti_slices(run, model, layer: int) -> list[Callable[[], Tensor | None]]:
    """ALTI's contributions of each input token to each token's attention-block output, in slices of whole
    chunks of queries: the last slice returns them all. [query, key]

    Computed as σ_i (T̃_i(x_j) − y_i) in one product per chunk of queries, the memory-bound part: in a
    post-LN block σ_i T̃_i(x_j) = Σ_h α_ij^h γ⊙f_h(x_j) + [i = j] γ⊙x_j − γ·mean(T_i(x_j)), the mean being
    the same α-weighted sum of the vectors' means, so the mean becomes one more "head" with the vector −γ
    (a pre-LN block: γ = 1, σ = 1, no mean). Then ‖y_i − T̃_i(x_j)‖₁ = ‖σ_i (T̃_i(x_j) − y_i)‖₁ / σ_i.
    Materialising T, T − mean, γ⊙… and y − T̃ one after another took three times as long. The weights are
    read ROW_CHUNK queries at a time (Run.weight_rows, the block's to float32 rounding), never as a whole block, and the
    contributions are written in float32 as they are made: the memory stays alti_bytes, linear in the
    tokens but for the answer itself."""
    n, d_model = run.block_input(layer).shape
    per_query = n * (run.n_heads + 1) * d_model
    rows = max(1, SLICE_WORK // per_query // ROW_CHUNK) * ROW_CHUNK
    chunk = query_chunk(n, d_model)
    heads = list(range(run.n_heads))
    contributions = torch.empty(n, n)
    block: dict = {}  # what every slice reads, made by the first

    def rows_of(start: int, stop: int) -> Callable[[], Tensor | None]:
        @torch.inference_mode()
        def compute() -> Tensor | None:
            if not block:
                block.update(alti_block(run, model, layer))
            for first in range(start, stop, ROW_CHUNK):
                last = min(first + ROW_CHUNK, stop)
                weights = run.weight_rows(layer, heads, range(first, last)).double()  # [head, query, key]
                for part in range(first, last, chunk):
                    queries = torch.arange(part, min(part + chunk, last))
                    alti_rows(contributions, queries, weights[:, queries - first], **block)
            return contributions if stop == n else None

        return compute

    return [rows_of(start, min(start + rows, n)) for start in range(0, n, rows)]


def alti_block(run, model, layer: int) -> dict:
    """What ALTI's rows of block `layer` read, in float64: the vectors per "head" (the mean as one more in a
    post-LN block), each token's own vector (σ_i x_i where an RMSNorm scales attention's output before the
    residual, Gemma's), the mean's weights, σ, σ_i y_i and ‖y_i‖₁."""
    f = transformed_values(run, model, layer).double()  # [head, key, d_model]
    x = run.block_input(layer).double()  # [key, d_model]
    y = run.activations[names.block(layer, "resid_mid")].double()  # [query, d_model]
    n, d_model = x.shape
    _, _, layer_norm = attention_output_weights(run, model, layer)
    family = run.family
    means = own_means = None
    if family.attention_norm is not None:
        # σ_i(T̃_i(x_j) − y_i) = Σ_h α_ij^h γ⊙f_h(x_j) + [i = j] σ_i x_j − σ_i y_i, σ_i the RMSNorm's scale of
        # token i's attention output (its bias included).
        norm = model.base_model.get_submodule(f"{family.blocks}.{layer}.{family.attention_norm}")
        gamma = norm.weight.detach().double() + family.norm_offset
        eps = getattr(norm, "eps", None) or norm.variance_epsilon
        out = run.activations[names.block(layer, "attention_output")].double()
        sigma = (out.pow(2).mean(-1) + eps).sqrt()  # [query]
        vectors, own = gamma * f, sigma[:, None] * x
    elif layer_norm is None:
        vectors, own, sigma = f, x, torch.ones(n, dtype=torch.float64)
    else:
        gamma = layer_norm.weight.detach().double()
        # σ_i: the LayerNorm's scale for token i, from its input x_i + attention output (bias included).
        resid = x + run.activations[names.block(layer, "attention_output")].double()
        sigma = (resid.var(-1, unbiased=False) + layer_norm.eps).sqrt()  # [query]
        vectors = torch.cat([gamma * f, -gamma.expand(1, n, d_model)])  # [head + 1, key, d_model]
        own = gamma * x
        means, own_means = f.mean(-1), x.mean(-1)  # [head, key], [key]
    return {
        "vectors": vectors,
        "own": own,
        "means": means,
        "own_means": own_means,
        "sigma": sigma,
        "target": sigma[:, None] * y,  # σ_i y_i
        "y_size": y.abs().sum(-1),  # ‖y_i‖₁
    }


def alti_rows(contributions, queries, alpha, vectors, own, means, own_means, sigma, target, y_size) -> None:
    """ALTI's rows for `queries` (one chunk), from their weights `alpha` [head, chunk, key] in float64, written
    into `contributions` [query, key] (float32: each value rounded once, as a float64 block cast at the end)."""
    chunk = torch.arange(len(queries))
    if means is not None:
        mean = torch.einsum("hqk,hk->qk", alpha, means)  # mean(T_i(x_j)) without the residual
        mean[chunk, queries] += own_means[queries]
        alpha = torch.cat([alpha, mean[None]])
    scaled = torch.einsum("hqk,hkd->qkd", alpha, vectors)  # [chunk, key, d_model]
    scaled[chunk, queries] += own[queries]  # the residual: token i carries itself
    scaled -= target[queries, None, :]
    distance = torch.linalg.vector_norm(scaled, ord=1, dim=-1) / sigma[queries, None]
    kept = (y_size[queries, None] - distance).clamp_min(0)
    contributions[queries] = (kept / kept.sum(-1, keepdim=True)).to(contributions.dtype)


def mean_view(blocks: list[Tensor], heads: list[int], over_blocks: bool) -> list[Tensor]:
    """The mean of the chosen heads of each block ([1, query, key] each), or of those means over every
    block (one [1, query, key]): what the page shows for "mean of heads" and "all blocks averaged", summed
    in float64 as the page would."""
    means = [block[heads].double().mean(0, keepdim=True) for block in blocks]
    if over_blocks:
        means = [torch.stack(means).mean(0)]
    return [mean.float() for mean in means]


def block_slices(run, model, measure: Measure, layer: int) -> list[Callable[[], Tensor | None]]:
    """Block `layer` of a measure computed from the run itself (norm or ALTI), in slices to run one after
    another; the last returns the block in the attention endpoint's shape, [head (or 1), query, key]. A
    model without an adapter has its weights only (NeedsAdapter, at once)."""
    run.check_adapter()
    if measure == "norm":
        return [torch.inference_mode()(lambda: norm(run, model, layer))]
    if measure == "alti":
        *first, last = alti_slices(run, model, layer)
        return [*first, lambda: last()[None]]
    raise ValueError(f"{measure} is not computed from one block alone")


@torch.inference_mode()
def rolled(contributions: Tensor, before: Tensor | None) -> Tensor:
    """ALTI rollout of a block, R_l = C_l R_{l-1}, from its contributions C_l [1, query, key] and the rollout
    of the block before (None for the first). [1, query, key]"""
    return contributions if before is None else contributions @ before
