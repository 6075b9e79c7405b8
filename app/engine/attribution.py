"""Which input tokens make an output what it is: gradient × input and Integrated Gradients (Sundararajan et
al. 2017, through Captum), per token, for a target the caller names as a function of the model's output.

Two targets: the bi-encoder similarity, the cosine of the text's sentence vector (the model's own
pooling over its first max_seq_length tokens) with a second sentence's; and, for a model with a
language-model head, the logit of one next token after the text (the LM head on the last position).
Attributions are taken with respect to the word-embedding rows (positions and token types stay as they
are) against an all-zero baseline, and summed over the embedding dimensions: one number per token.
Integrated Gradients' completeness, Σ attributions = f(x) − f(baseline), holds up to the reported convergence delta.
"""

from collections.abc import Callable
from typing import Literal

import torch
from captum.attr import InputXGradient, IntegratedGradients
from torch import Tensor

Method = Literal["integrated_gradients", "gradient_x_input"]
Target = Literal["similarity", "next_token"]
INTERNAL_BATCH = 8  # IG's interpolation steps run this many at a time: memory stays that of 8 passes


def hidden_states(trunk, family, types: Tensor, **inputs) -> Tensor:
    """The model's last hidden states [batch, pos, d_model]; token types only for a family that takes them."""
    if family.token_types:
        inputs["token_type_ids"] = types
    return trunk(**inputs).last_hidden_state


def attribute(
    trunk,
    family,
    input_ids: Tensor,
    token_type_ids: Tensor,
    target: Callable[[Tensor], Tensor],
    method: Method,
    steps: int,
) -> dict:
    """trunk: the model without a head; target: last hidden states [batch, pos, d_model] -> one number per
    batch row."""
    word_rows = trunk.get_input_embeddings()(input_ids[None]).detach().requires_grad_()  # [1, pos, d_model]

    def forward(rows: Tensor) -> Tensor:
        types = token_type_ids[None].expand(len(rows), -1)
        return target(hidden_states(trunk, family, types, inputs_embeds=rows))

    baseline = torch.zeros_like(word_rows)
    if method == "integrated_gradients":
        attributions, delta = IntegratedGradients(forward).attribute(
            word_rows,
            baselines=baseline,
            n_steps=steps,
            internal_batch_size=INTERNAL_BATCH,
            return_convergence_delta=True,
        )
        delta = float(delta[0])
    else:
        attributions, delta = InputXGradient(forward).attribute(word_rows), None
    with torch.no_grad():
        output, at_baseline = float(forward(word_rows)[0]), float(forward(baseline)[0])
    return {
        "attributions": attributions[0].sum(-1).detach(),  # [pos]
        "output": output,
        "baseline_output": at_baseline,
        "delta": delta,
    }


def similarity_target(
    trunk, family, other_ids: Tensor, other_types: Tensor, sentence: Callable[[Tensor], Tensor]
) -> Callable[[Tensor], Tensor]:
    """cosine(sentence(output), sentence(the other sentence's output)), the bi-encoder's similarity, as a
    target; `sentence`: last hidden states [pos, d_model] -> the model's sentence vector (its pooling, and
    its Dense and Normalize modules where it has them)."""
    with torch.no_grad():
        other = sentence(hidden_states(trunk, family, other_types[None], input_ids=other_ids[None])[0])

    def cosine(hidden: Tensor) -> Tensor:  # [batch, pos, d_model] -> [batch]
        pooled = torch.stack([sentence(rows) for rows in hidden])
        return torch.nn.functional.cosine_similarity(pooled, other[None], dim=-1)

    return cosine


def next_token_target(
    lm_head: torch.nn.Module, token_id: int, softcap: float | None = None
) -> Callable[[Tensor], Tensor]:
    """The LM head's logit of `token_id` after the last position, as a target; soft-capped, c·tanh(logit/c),
    where the model caps its logits (Gemma's final_logit_softcapping)."""

    def logit(hidden: Tensor) -> Tensor:  # [batch, pos, d_model] (after the final norm) -> [batch]
        value = lm_head(hidden[:, -1])[:, token_id]
        return value if softcap is None else softcap * torch.tanh(value / softcap)

    return logit
