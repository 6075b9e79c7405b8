"""Measurements for the lessons, from a kept run's numbers: comparisons, what each head does, attention
rollout, nearest vocabulary rows and pooling strategies. Each is the formula it names, nothing more."""

import torch
from torch import Tensor

from app.capture import pool

# A head is labelled by what it does only when the measured share passes this.
LABEL_THRESHOLD = 0.5
HEAD_LABELS = {
    "cls": "[CLS] head",
    "sep": "[SEP] head",
    "self": "self head",
    "previous": "previous-token head",
    "next": "next-token head",
}


def cosine(a: Tensor, b: Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))


def token_stages(run, index: int) -> dict[str, Tensor]:
    """The token's vector at each stage: its word-embedding row, the embeddings' output, each block."""
    stages = {
        "word embedding": run.activations["embeddings.word"][index],
        "embeddings (LayerNorm)": run.activations["embeddings.normalized"][index],
    }
    for layer in range(run.n_layers):
        stages[f"block {layer}"] = run.activations[f"blocks.{layer}.output"][index]
    return stages


def compare(run_a, token_a: int, run_b, token_b: int) -> dict:
    """How one token's vector differs between two runs, stage by stage, and how their attention differs."""
    stages_a, stages_b = token_stages(run_a, token_a), token_stages(run_b, token_b)
    same_shape = len(run_a.tokens) == len(run_b.tokens)
    return {
        "same_id": run_a.tokens[token_a].id == run_b.tokens[token_b].id,
        "stages": list(stages_a),
        "cosines": [cosine(stages_a[stage], stages_b[stage]) for stage in stages_a],
        "pooled_cosine": cosine(run_a.pooled, run_b.pooled),
        # Mean |A_a − A_b| over every head's cells, per block: only where the two runs have one shape.
        "attention_change": (
            [float((a - b).abs().mean()) for a, b in zip(run_a.attention(), run_b.attention(), strict=True)]
            if same_shape
            else None
        ),
    }


def head_stats(run) -> list[dict]:
    """Per head: mean row entropy (nats) and the mean share of attention each query gives to [CLS], to
    [SEP], to itself, to the previous token, to the next one, and to "." tokens."""
    cls_keys = torch.tensor([token.special and token.text == "[CLS]" for token in run.tokens])
    sep_keys = torch.tensor([token.special and token.text == "[SEP]" for token in run.tokens])
    period_keys = torch.tensor([token.text == "." for token in run.tokens])
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
                    "label": HEAD_LABELS[strongest] if values[strongest] >= LABEL_THRESHOLD else None,
                }
            )
    return stats


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
        cosines = table @ (vector / vector.norm())
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


def pooling_strategies(run) -> dict[str, Tensor]:
    output = run.activations[f"blocks.{run.n_layers - 1}.output"]
    return {strategy: pool(output, strategy) for strategy in ("mean", "cls", "max")}
