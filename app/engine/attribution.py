"""Which input tokens make an output what it is: gradient × input and Integrated Gradients (Sundararajan et
al. 2017, through Captum), per token, for a target the caller names as a function of the model's output.

Two targets: the bi-encoder similarity, the cosine of the text's sentence vector (the model's own
pooling over its first max_seq_length tokens) with a second sentence's; and, for a model with a
language-model head, the logit of one next token after the text (the LM head on the last position).
Attributions are taken with respect to the word-embedding rows (positions and token types stay as they
are) against an all-zero baseline, and summed over the embedding dimensions: one number per token.
Integrated Gradients' completeness, Σ attributions = f(x) − f(baseline), holds up to the reported convergence delta.

A request is checked against the engine's model at once (attribution_job); its work comes in slices
(attribution_slices), each a bounded number of IG's steps × tokens, so that a server can give its model's turn
to others between them and stop when nobody waits (app.serving.work). A
slice is one of Captum's own batches of steps (its internal_batch_size), added to the others in Captum's
order: the slices together give exactly what Captum gives with that batch size.
"""

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor
from transformers import PreTrainedModel

from app.engine.capture import on_cpu
from app.engine.engine import Engine
from app.engine.errors import InvalidInput
from app.engine.model import upcast_bytes
from app.engine.placement import dtype_name
from app.engine.runs import Token

Method = Literal["integrated_gradients", "gradient_x_input"]
Target = Literal["similarity", "next_token"]
IG_METHOD = "gausslegendre"  # Captum's default rule for the path integral
# IG's steps × tokens in one slice: a batch of steps costs about that many token-passes, forward and
# backward, a slice short enough that others' turns come often (bench/README.md); at least one step.
STEP_TOKENS_PER_SLICE = 256


def steps_per_slice(tokens: int) -> int:
    return max(1, STEP_TOKENS_PER_SLICE // tokens)


def attribution_bytes(engine: Engine, tokens: int) -> int:
    """Attribution's peak memory, stated before it starts: a slice's batch of steps with their gradients, and the
    model's float32 copy where it is in half precision."""
    return engine.footprint.backward_bytes(steps_per_slice(tokens), tokens) + upcast_bytes(engine.loaded)


def attribution_job(
    engine: Engine,
    text: str,
    method: str,
    steps: int,
    target: Target = "similarity",
    other: str | None = None,
    next_token: int | None = None,
    max_step_tokens: int | None = None,
    model: PreTrainedModel | None = None,
) -> list[Callable[[], dict | None]]:
    """Which tokens of `text` make its output what it is, as the engine reads it: its similarity to
    `other`, or the LM head's logit of `next_token` after it (its most likely one by default). The
    request is checked here and now; the work comes as slices to run one after another, the last of
    which returns the answer. Integrated Gradients costs about steps × tokens, at most max_step_tokens.
    `model`: the one computed with (the served one by default; its float32 copy, app.engine.model.upcast)."""
    for checked in (text, other or ""):
        engine.spec(checked or " ")  # the same character cap as any run
    loaded = engine.loaded
    model = model or loaded.model
    trunk = model.base_model

    def as_ids(found: list[Token], field: str) -> Tensor:  # on the model's device, as its pipeline below
        return torch.tensor([getattr(token, field) for token in found], device=model.device)

    pipeline = loaded.pipeline.to(model.device)
    if target == "similarity":
        if other is None:
            raise InvalidInput("the similarity target needs `other`, the sentence to compare with")
        tokens, _ = engine.tokenize(text, None, loaded.max_seq_length)
        others, _ = engine.tokenize(other, None, loaded.max_seq_length)
        about = {"kind": "similarity", "other": other}

        def make_target():
            return similarity_target(
                trunk,
                loaded.family,
                as_ids(others, "id"),
                as_ids(others, "token_type"),
                lambda hidden: pipeline.stages(hidden, loaded.default_pooling)[-1].vector,
            )
    else:
        if not loaded.has_lm_head:
            raise InvalidInput(f"{loaded.name} has no language-model head: it predicts no next token")
        tokens, _ = engine.tokenize(text)
        if next_token is not None and not 0 <= next_token < loaded.model.config.vocab_size:
            raise InvalidInput(
                f"next_token {next_token} is not in the vocabulary (0 to {loaded.model.config.vocab_size - 1})"
            )
        about = {"kind": "next_token", "token_id": next_token, "position": len(tokens) - 1}
        softcap = getattr(loaded.model.config, "final_logit_softcapping", None)

        def make_target():
            if about["token_id"] is None:
                about["token_id"] = next_token_of(model, as_ids(tokens, "id"))
            about["token"] = engine.pieces([about["token_id"]])[0]
            return next_token_target(model.get_output_embeddings(), about["token_id"], softcap)

    cost = steps * len(tokens)
    if method == "integrated_gradients" and max_step_tokens is not None and cost > max_step_tokens:
        raise InvalidInput(
            f"Integrated Gradients costs steps × tokens: {steps} × {len(tokens)} = {cost:,} is past this lab's "
            f"bound of {max_step_tokens:,}; ask for fewer steps or a shorter text"
        )
    *first, last = attribution_slices(
        trunk, loaded.family, as_ids(tokens, "id"), as_ids(tokens, "token_type"), make_target, method, steps
    )

    def answer() -> dict:
        computed = {"computed_in": dtype_name(model.dtype), "model_dtype": loaded.dtype}
        return {"method": method, "tokens": tokens, "target": about, **computed, **last()}

    return [*first, answer]


def next_token_of(model: PreTrainedModel, input_ids: Tensor) -> int:
    """The LM head's most likely token after the ids."""
    with torch.inference_mode():
        return int(model(input_ids=input_ids[None].to(model.device)).logits[0, -1].argmax())


def hidden_states(trunk, family, types: Tensor, **inputs) -> Tensor:
    """The model's last hidden states [batch, pos, d_model]; token types only for a family that takes them."""
    if family.token_types:
        inputs["token_type_ids"] = types
    return trunk(**inputs).last_hidden_state


def attribution_slices(
    trunk,
    family,
    input_ids: Tensor,
    token_type_ids: Tensor,
    make_target: Callable[[], Callable[[Tensor], Tensor]],
    method: Method,
    steps: int,
) -> list[Callable[[], dict | None]]:
    """Attributions in slices, to run one after another: the last returns {attributions [pos], output,
    baseline_output, delta}. The first slice makes the target and the output at both ends of the path, each
    next one a batch of IG's steps. trunk: the model without a head; make_target: the target (making it may
    run the model), a function of the last hidden states [batch, pos, d_model] -> one number per batch row.
    The ids are on the trunk's device; the attributions come back on the CPU."""
    # Imported here, where attributions are made: Captum loads matplotlib, which would lengthen every start.
    from captum.attr import InputXGradient, IntegratedGradients
    from captum.attr._utils.approximation_methods import approximation_parameters

    work: dict = {}

    def begin() -> None:
        """The target, and the output at both ends of the path: the text's and the all-zero baseline's."""
        target = make_target()
        word_rows = trunk.get_input_embeddings()(input_ids[None]).detach().requires_grad_()  # [1, pos, d_model]

        def forward(rows: Tensor) -> Tensor:
            types = token_type_ids[None].expand(len(rows), -1)
            return target(hidden_states(trunk, family, types, inputs_embeds=rows))

        baseline = torch.zeros_like(word_rows)
        with torch.no_grad():
            output, at_baseline = forward(word_rows), forward(baseline)  # [1] each
        work.update(forward=forward, rows=word_rows, baseline=baseline, output=output, at_baseline=at_baseline)

    def finish(attributions: Tensor, delta: float | None) -> dict:
        return {
            "attributions": on_cpu(attributions[0].sum(-1).detach()),  # [pos]
            "output": float(work["output"][0]),
            "baseline_output": float(work["at_baseline"][0]),
            "delta": delta,
        }

    if method != "integrated_gradients":

        def gradient_x_input() -> dict:
            begin()
            return finish(InputXGradient(work["forward"]).attribute(work["rows"]), None)

        return [gradient_x_input]

    sizes, alphas = (function(steps) for function in approximation_parameters(IG_METHOD))

    def ig_steps(first: int, last: int) -> Callable[[], dict | None]:
        def compute() -> dict | None:
            (part,) = IntegratedGradients(work["forward"])._attribute(  # one of Captum's own batches of steps
                inputs=(work["rows"],),
                baselines=(work["baseline"],),
                n_steps=last - first,
                method=IG_METHOD,
                step_sizes_and_alphas=(sizes[first:last], alphas[first:last]),
            )
            work["total"] = part if first == 0 else part.detach() + work["total"]
            if last < steps:
                return None
            # Captum's convergence delta (compute_convergence_delta), from the ends computed in the first slice.
            total = work["total"]
            with torch.no_grad():
                delta = total.reshape(1, -1).sum(1) - (work["output"] - work["at_baseline"])
            return finish(total, float(delta[0]))

        return compute

    per_slice = steps_per_slice(len(input_ids))
    return [begin, *(ig_steps(first, min(first + per_slice, steps)) for first in range(0, steps, per_slice))]


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
