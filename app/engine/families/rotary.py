"""Rotary positions (RoPE), shared by the families that rotate q and k inside attention: the model's rotary
module is hooked for its cos and sin, and after the pass q and k are rotated by the model's own
apply_rotary_pos_emb, so that the lab shows them as the scores use them."""

import sys
from collections.abc import Callable

from torch import Tensor

from app.engine.families.base import Hook
from app.engine.names import attn

ROTARY = "rotary"  # cos and sin of the pass, kept until the rotation: not a name the lab serves


def rotary_embedding(module: str = "rotary_emb") -> Hook:
    """The rotary module's (cos, sin), [batch, pos, d_head] each. A model whose block types rotate by other
    frequencies (ModernBERT's and Gemma 3's global and local blocks) asks it once per type, the type its
    third argument: each is kept under its type."""
    return Hook(module, lambda args, out: {f"{ROTARY}.{args[2]}" if len(args) > 2 else ROTARY: out})


def rotating(blocks: str, attention: str) -> Callable[[dict[str, Tensor], object], None]:
    """A family's finish step: each block's q and k rotated as its attention module rotates them, with the
    cos and sin of the block's type where they differ by type. [batch, head, pos, d_head]"""

    def rotate(activations: dict[str, Tensor], model) -> None:
        config = model.config
        layers = model.base_model.get_submodule(blocks)
        apply = sys.modules[type(layers[0].get_submodule(attention)).__module__].apply_rotary_pos_emb
        types = getattr(config, "layer_types", None) or [None] * config.num_hidden_layers
        by_type = {key: activations.pop(key) for key in [*activations] if key.startswith(ROTARY)}
        for layer in range(config.num_hidden_layers):
            cos, sin = by_type.get(f"{ROTARY}.{types[layer]}", by_type.get(ROTARY))
            q, k = attn(layer, "q"), attn(layer, "k")
            activations[q], activations[k] = apply(activations[q], activations[k], cos, sin)

    return rotate
