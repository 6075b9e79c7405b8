"""What a training's heads have learnt at a checkpoint, on held-out sequences [prefix o][R][R] of periods and
offsets never trained on (app.engine.training.data.conditions), from an ordinary forward pass's attention
(eager, output_attentions) and from the weights:

- previous-token score of a head: its mean attention from position i to i - 1 (i >= 1); uniform attention gives
  about 0.08 on 57 tokens, a previous-token head 1.
- prefix-matching (induction) score at a condition: the mean attention from each token i of the second copy to the
  token after that token's earlier occurrence, i - P + 1; uniform gives 0.02-0.03, an induction head near 1. Its
  minimum over the held-out conditions is what the criterion reads.
- offset profile: the second copy's mean attention at each distance d = i - j; its peak says what the head attends
  to. A content (induction) head peaks at d = P - 1 whatever P; an offset head at one d at every P.
- copying score (Olsson et al. 2022), from the weights alone: the eigenvalues λ of the head's OV circuit
  M = N(W_E) W_V W_O diag(g) W_U (V × V; N the block's input norm applied to each token's embedding, g the final
  norm's gain; biases left out), sum(λ) / sum(|λ|): +1 for a head that raises the logit of the token it attends to,
  -1 for one that lowers it. Computed through the head-dim square matrix (W_O diag(g) W_U)(N(W_E) W_V), whose
  eigenvalues are M's non-zero ones. With it, the share of tokens whose own logit is the largest in their row of M
  (self-copy).
- copy losses at a condition: the mean next-token loss (nats) over the first copy's tokens after its first and
  over the second copy's likewise; the in-context loss is the second's (< 1.0 is the criterion), ln V the first's.

A head is an induction head when its prefix-matching score is at least INDUCTION_SCORE at every held-out condition
while the in-context loss is below IN_CONTEXT_LOSS at every one of them (REPORT.md's criterion)."""

import torch
from transformers import PreTrainedModel

from app.engine.training.data import Condition, Data

INDUCTION_SCORE = 0.5
IN_CONTEXT_LOSS = 1.0
# The phase change is marked where the in-context loss has fallen by at least this many nats from its plateau.
PHASE_DROP = 1.0


@torch.no_grad()
def head_scores(model: PreTrainedModel, data: Data, conditions: list[Condition]) -> dict:
    """Every head's scores and the copy losses at each condition, as JSON-ready lists [layer][head]."""
    implementation = model.config._attn_implementation
    model.set_attn_implementation("eager")  # attention weights come back from the eager path alone
    was_training = model.training
    model.eval()
    try:
        rows = [condition_scores(model, data.held_out(condition), condition) for condition in conditions]
        text = data.held_out_text()
        held_out_loss = None if text is None else text_loss(model, text)
    finally:
        model.set_attn_implementation(implementation)
        model.train(was_training)
    judged = [row for row, condition in zip(rows, conditions, strict=True) if not condition.trained]
    prefix = torch.stack([row["prefix"] for row in judged])  # [condition, layer, head]
    worst = prefix.min(0).values
    best = divmod(int(worst.argmax()), worst.shape[1])
    worst_loss = max(row["second"] for row in judged)
    copying, self_copy = copying_scores(model)
    return {
        "conditions": [
            {
                "period": condition.period,
                "offset": condition.offset,
                "trained": condition.trained,
                "prefix": rounded(row["prefix"]),
                "peak_distance": row["peak_distance"].tolist(),
                "peak_weight": rounded(row["peak_weight"]),
                "first_copy_loss": round(row["first"], 4),
                "in_context_loss": round(row["second"], 4),
            }
            for row, condition in zip(rows, conditions, strict=True)
        ],
        "previous": rounded(torch.stack([row["previous"] for row in judged]).mean(0)),
        "prefix": rounded(prefix.mean(0)),
        "prefix_min": rounded(worst),
        "copying": rounded(copying),
        "self_copy": rounded(self_copy),
        "in_context_loss": round(sum(row["second"] for row in judged) / len(judged), 4),
        "worst_in_context_loss": round(worst_loss, 4),
        "first_copy_loss": round(sum(row["first"] for row in judged) / len(judged), 4),
        "held_out_loss": held_out_loss,
        "induction_head": [best[0], best[1]],
        "induction_score": round(float(worst[best]), 4),
        "formed": bool(worst[best] >= INDUCTION_SCORE and worst_loss < IN_CONTEXT_LOSS),
    }


def condition_scores(model: PreTrainedModel, tokens: torch.Tensor, condition: Condition) -> dict:
    out = model(input_ids=tokens, output_attentions=True)
    weights = torch.stack(out.attentions, dim=1).double()  # [sequence, layer, head, query, key]
    period, offset = condition.period, condition.offset
    positions = torch.arange(1, tokens.shape[1])
    previous = weights[..., positions, positions - 1].mean(-1).mean(0)  # [layer, head]
    queries = torch.arange(offset + period, offset + 2 * period)  # the second copy
    prefix = weights[..., queries, queries - period + 1].mean(-1).mean(0)
    profile = offset_profile(weights.mean(0), queries)  # [layer, head, distance]
    peak = profile.max(-1)
    logp = torch.log_softmax(out.logits.double(), dim=-1)  # [sequence, position, vocab]
    first = torch.arange(offset + 1, offset + period)  # targets: each copy's tokens after its first
    second = torch.arange(offset + period + 1, offset + 2 * period)
    return {
        "previous": previous,
        "prefix": prefix,
        "peak_distance": peak.indices,
        "peak_weight": peak.values,
        "first": copy_loss(logp, tokens, first),
        "second": copy_loss(logp, tokens, second),
    }


def offset_profile(weights: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """The queries' mean attention at each distance d = query - key, [..., distance] (distances 0..last query)."""
    keys = torch.arange(weights.shape[-1])
    distance = (queries[:, None] - keys[None, :]).clamp(min=0)  # [query, key]; keys past the query weigh 0
    rows = weights[..., queries, :]  # [..., query, key]
    profile = torch.zeros(*weights.shape[:-2], int(queries[-1]) + 1, dtype=weights.dtype)
    profile.scatter_add_(-1, distance.expand_as(rows).reshape(*rows.shape[:-2], -1), rows.reshape(*rows.shape[:-2], -1))
    return profile / len(queries)


def copy_loss(logp: torch.Tensor, tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean -log p of the tokens at `targets`, each predicted at the position before it."""
    picked = logp[:, targets - 1, :].gather(-1, tokens[:, targets, None])
    return float(-picked.mean())


def text_loss(model: PreTrainedModel, windows: torch.Tensor) -> float:
    """Mean next-token loss over held-out windows of a text, [window, length + 1]."""
    logits = model(input_ids=windows[:, :-1]).logits
    return round(float(torch.nn.functional.cross_entropy(logits.double().flatten(0, 1), windows[:, 1:].flatten())), 4)


def ov_parts(model: PreTrainedModel) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Each head's (N(W_E) W_V, W_O diag(g) W_U) in float64, [layer][head]: [vocab, head dim] and [head dim, vocab]."""
    config = model.config
    heads = config.num_attention_heads
    d_head = config.hidden_size // heads
    if config.model_type == "llama":
        embed = model.model.embed_tokens.weight.double()
        unembed = (model.lm_head.weight.double() * model.model.norm.weight.double()).T
        blocks = [
            (
                rms_rows(embed, block.input_layernorm.weight.double(), config.rms_norm_eps),
                block.self_attn.v_proj.weight.double().T,  # [hidden, heads × head dim]
                block.self_attn.o_proj.weight.double().T,  # [heads × head dim, hidden]
            )
            for block in model.model.layers
        ]
    else:
        hidden = config.hidden_size
        embed = model.transformer.wte.weight.double()
        unembed = (model.lm_head.weight.double() * model.transformer.ln_f.weight.double()).T
        blocks = [
            (
                torch.nn.functional.layer_norm(
                    embed, (hidden,), block.ln_1.weight.double(), block.ln_1.bias.double(), config.layer_norm_epsilon
                ),
                block.attn.c_attn.weight.double()[:, 2 * hidden :],  # Conv1D: x @ W
                block.attn.c_proj.weight.double(),
            )
            for block in model.transformer.h
        ]
    return [
        [
            (read @ values[:, h * d_head : (h + 1) * d_head], outputs[h * d_head : (h + 1) * d_head] @ unembed)
            for h in range(heads)
        ]
        for read, values, outputs in blocks
    ]


def rms_rows(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def copying_scores(model: PreTrainedModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's copying score and self-copy share, [layer, head] each."""
    parts = ov_parts(model)
    score = torch.zeros(len(parts), len(parts[0]), dtype=torch.float64)
    own = torch.zeros_like(score)
    for layer, heads in enumerate(parts):
        for head, (read, written) in enumerate(heads):
            eigenvalues = torch.linalg.eigvals(written @ read)
            score[layer, head] = eigenvalues.real.sum() / eigenvalues.abs().sum()
            circuit = read @ written  # [vocab, vocab]
            own[layer, head] = (circuit.argmax(-1) == torch.arange(len(circuit))).double().mean()
    return score, own


def rounded(values: torch.Tensor, digits: int = 4) -> list:
    return [[round(float(value), digits) for value in row] for row in values]


def phase_change(checkpoints: list[dict]) -> dict | None:
    """Where the held-out in-context loss drops, from the checkpoints so far: None until it has fallen PHASE_DROP
    nats below its plateau (its highest value before its lowest); then the steps where it had fallen a tenth, half
    and nine tenths of the way from the plateau to its lowest, and the step the induction head formed (the first
    of the passing checkpoints the record ends with), if it has."""
    if not checkpoints:
        return None
    losses = [checkpoint["scores"]["in_context_loss"] for checkpoint in checkpoints]
    lowest = min(range(len(losses)), key=losses.__getitem__)
    plateau = max(losses[: lowest + 1])
    drop = plateau - losses[lowest]
    if drop < PHASE_DROP:
        return None
    top = losses.index(plateau)

    def fallen(share: float) -> int:
        return next(checkpoints[i]["step"] for i in range(top, lowest + 1) if losses[i] <= plateau - share * drop)

    formed = None
    for checkpoint in reversed(checkpoints):
        if not checkpoint["scores"]["formed"]:
            break
        formed = checkpoint["step"]
    return {
        "start": fallen(0.1),
        "step": fallen(0.5),
        "end": fallen(0.9),
        "plateau_loss": round(plateau, 4),
        "lowest_loss": round(losses[lowest], 4),
        "formed": formed,
        "drop_nats": round(drop, 4),
    }
