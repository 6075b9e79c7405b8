"""Measurements for the lessons, from a kept run's numbers: comparisons, what each head does, attention
rollout, nearest vocabulary rows and pooling strategies. Each is the formula it names, nothing more."""

import torch
from torch import Tensor

from app.engine import names
from app.engine.sentence import pool

# A head is labelled by what it does only when the measured share passes this.
LABEL_THRESHOLD = 0.5
ROLE_LABELS = {"self": "self head", "previous": "previous-token head", "next": "next-token head"}


def cosine(a: Tensor, b: Tensor) -> float:
    # Rounding can carry the cosine of two equal vectors just past 1.
    return min(1.0, max(-1.0, float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))))


def token_stages(run, index: int) -> dict[str, Tensor]:
    """The token's vector at each stage: its word-embedding row, what block 0 reads, each block."""
    embeddings = run.embeddings()
    stages = {"word embedding": embeddings["word"][index]}
    if len(embeddings) > 1:
        stages["embeddings (LayerNorm)" if "normalized" in embeddings else "embeddings"] = run.block_input(0)[index]
    for layer in range(run.n_layers):
        stages[f"block {layer}"] = run.activations[names.block(layer, "output")][index]
    return stages


def compare(run_a, token_a: int, run_b, token_b: int) -> dict:
    """How one token's vector differs between two runs, stage by stage, and how their attention differs."""
    stages_a, stages_b = token_stages(run_a, token_a), token_stages(run_b, token_b)
    same_shape = len(run_a.tokens) == len(run_b.tokens)
    return {
        "same_id": run_a.tokens[token_a].id == run_b.tokens[token_b].id,
        "stages": list(stages_a),
        "cosines": [cosine(stages_a[stage], stages_b[stage]) for stage in stages_a],
        "pooled_cosine": cosine(run_a.embedding, run_b.embedding),
        # Mean |A_a − A_b| over every head's cells, per block: only where the two runs have one shape.
        "attention_change": (
            [float((a - b).abs().mean()) for a, b in zip(run_a.attention(), run_b.attention(), strict=True)]
            if same_shape
            else None
        ),
    }


def added_names(run) -> dict[str, str]:
    """The tokens the tokenizer added, by role: "cls" the one that opens the input ([CLS], <s>), "sep"
    those that close its segments ([SEP], </s>); each named as it is written, "+" between kinds."""
    names = {"cls": [], "sep": []}
    for token in run.tokens:
        if token.added:
            names["cls" if token.index == 0 else "sep"].append(token.text)
    return {role: "+".join(dict.fromkeys(found)) for role, found in names.items()}


def head_stats_bytes(run) -> int:
    """head_stats' peak: a block's weights computed, then three blocks of its entropy's terms beside them."""
    return run.weights_peak_bytes + 3 * run.block_bytes


def head_stats(run) -> list[dict]:
    """Per head: mean row entropy (nats) and the mean share of attention each query gives to the token the
    tokenizer put first ([CLS]), to those it put at the ends of the segments ([SEP]), to itself, to the
    previous token, to the next one, and to "." tokens. Only tokens the tokenizer added count as [CLS] or
    [SEP]: one typed in the text is text."""
    cls_keys = torch.tensor([token.added and token.index == 0 for token in run.tokens])
    sep_keys = torch.tensor([token.added and token.index > 0 for token in run.tokens])
    period_keys = torch.tensor([token.text == "." for token in run.tokens])
    names = added_names(run)
    labels = {**{role: f"{name} head" for role, name in names.items()}, **ROLE_LABELS}
    stats = []
    for layer, weights in enumerate(run.attention()):  # [head, query, key]
        entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean(-1)
        shares = {
            "cls": weights[..., cls_keys].sum(-1).mean(-1),
            "sep": weights[..., sep_keys].sum(-1).mean(-1),
            "self": weights.diagonal(dim1=-2, dim2=-1).mean(-1),
            "previous": weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1),
            "next": weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1),
        }
        period = weights[..., period_keys].sum(-1).mean(-1)  # a sink in long texts; not a role label
        for head in range(run.n_heads):
            values = {name: float(share[head]) for name, share in shares.items()}
            strongest = max(values, key=values.get)
            stats.append(
                {
                    "layer": layer,
                    "head": head,
                    "entropy": float(entropy[head]),
                    **values,
                    "period": float(period[head]),
                    "label": labels[strongest] if values[strongest] >= LABEL_THRESHOLD else None,
                }
            )
    return stats


def rollout_bytes(run) -> int:
    """rollout's peak: a block's weights computed, and six tokens² float64 matrices (the identity, the flow,
    the mixed block and the steps between)."""
    return run.weights_peak_bytes + 6 * len(run.tokens) ** 2 * 8


def rollout(run) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): average the heads, add the residual path as 0.5·I + 0.5·A,
    renormalise rows, and multiply through the blocks. Row i: how much each input token flows into token i."""
    n = len(run.tokens)
    identity = torch.eye(n, dtype=torch.float64)
    flow = identity
    for weights in run.attention():
        mixed = 0.5 * weights.double().mean(0) + 0.5 * identity
        flow = (mixed / mixed.sum(-1, keepdim=True)) @ flow
    return flow


def nearest_rows(run, index: int, table: Tensor, tokenizer, k: int) -> list[dict]:
    """Top-k rows of the (tied) word-embedding table by cosine to the token's vector after each stage:
    a projection, not a trained prediction head. `table` holds unit-length rows."""
    stages = {name: vector for name, vector in token_stages(run, index).items() if name != "word embedding"}
    found = []
    for name, vector in stages.items():
        cosines = table @ (vector / vector.norm()).to(table.device)  # the table stays with the model (a GPU's)
        top = cosines.topk(k)
        ids = top.indices.tolist()
        found.append(
            {
                "stage": name,
                "rows": [
                    {"id": row, "token": piece, "cosine": float(value)}
                    for row, piece, value in zip(ids, tokenizer.convert_ids_to_tokens(ids), top.values, strict=True)
                ],
            }
        )
    return found


def pooling_strategies(run, strategies: list[str]) -> dict[str, Tensor]:
    """Each pooling of what the model's pooling reads (its first max_seq_length tokens)."""
    return {strategy: pool(run.pooled_output, strategy, run.pooling_skip) for strategy in strategies}


def whole_input_vector(run) -> Tensor:
    """The run's pooling over every token it read, past the model's max_seq_length: not the model's own."""
    last = names.FINAL if names.FINAL in run.activations else names.block(run.n_layers - 1, "output")
    return pool(run.activations[last], run.spec.pooling, run.pooling_skip)
