"""A model of a family the lab has no adapter for, read for what transformers returns of any model: its own
attention weights (output_attentions) and its last hidden state, which the sentence vector pools. Nothing
inside its blocks is recorded, so the views that need Q/K/V, W_O or the FFN are not offered, and say why.
Whether it reads causally is what its weights show on a probe pass: a decoder's are zero above the diagonal."""

import inspect

import torch

from app.engine.families.base import Family, Hook
from app.engine.names import FINAL


class NoAttention(ValueError):
    """transformers does not return this model's attention weights."""


def last_hidden_state(args, out) -> dict:
    """The base model's output: what sentence-transformers pools, [batch, pos, d_model]."""
    return {FINAL: out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]}


def reason(model_type: str) -> str:
    """Why a view of such a model is not offered: the page and the API say it in these words."""
    return f"no adapter for the {model_type!r} family: attention weights only"


def attention_only(model: torch.nn.Module, tokenizer) -> Family:
    """The family of a model without an adapter, after one probe pass on a few tokens: its weights come
    back one [head, query, key] matrix per block, or it is refused (NoAttention)."""
    config = model.config
    if not all(hasattr(config, name) for name in ("num_hidden_layers", "num_attention_heads", "hidden_size")):
        raise NoAttention("its config gives no num_hidden_layers, num_attention_heads and hidden_size")
    ids = tokenizer("the cat sat on the mat", return_tensors="pt")["input_ids"]
    try:
        with torch.inference_mode():
            attentions = model(input_ids=ids, output_attentions=True).attentions
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise NoAttention(f"its probe pass failed: {first_line}") from error
    n = ids.shape[-1]
    shaped = (config.num_attention_heads, n, n)
    if (
        not attentions
        or len(attentions) != config.num_hidden_layers
        or any(weights is None or tuple(weights.shape[1:]) != shaped for weights in attentions)
    ):
        raise NoAttention("transformers returns no attention weights for it (output_attentions), one per block")
    causal = all(not weights[0].triu(1).any() for weights in attentions)
    return Family(
        name=config.model_type,
        model_types=(config.model_type,),
        blocks="",
        hooks=lambda config: (Hook("", last_hidden_state),),
        attention_output="",
        normalization=None,
        positions=None,
        gated_ffn=False,
        decoder=causal,
        token_types="token_type_ids" in inspect.signature(model.forward).parameters,
        attention_only=True,
    )
