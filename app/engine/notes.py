"""What a model's attention scores do besides softmax(q·k/√d_head + mask), in sentences: the worked example and
the tour print them (GET /api/model's `score_notes`), so that a learner never checks a number against a
formula the model does not use."""

import torch

from app.engine.capture import Scoring, head_dim


def score_notes(model: torch.nn.Module, family, scoring: tuple[Scoring, ...]) -> list[str]:
    if family.attention_only:
        return []
    config, notes = model.config, []
    d = head_dim(config)
    if family.qk_norm:
        gain = "1 + a learned gain" if family.norm_offset else "a learned gain"
        notes.append(
            f"q and k are RMS-normalised per head first: each head's {d} numbers are divided by their root mean "
            f"square and multiplied by {gain} (q_norm, k_norm)."
        )
    if family.positions == "rotary":
        where = [*([] if family.decoder else ["in this encoder too"]), *_frequencies(config)]
        notes.append(
            f"q and k are {'then ' if family.qk_norm else ''}rotated by their positions (RoPE"
            f"{''.join(f'; {part}' for part in where)}), so a score depends on how far apart the two tokens are. "
            "The q and k shown are the rotated ones."
        )
    scales = [block.scale for block in scoring]
    if any(abs(scale * d**0.5 - 1) > 1e-9 for scale in scales):
        scalar = getattr(config, "query_pre_attn_scalar", None)
        why = f"1/√{scalar:g} (query_pre_attn_scalar)" if scalar else "the block's own scale"
        notes.append(
            f"The dot product is multiplied by {why}, not 1/√{d}: "
            f"{', '.join(f'{scale:.5g}' for scale in dict.fromkeys(scales))}."
        )
    local = [layer for layer, block in enumerate(scoring) if block.window is not None]
    if local:
        sides = "before it (and itself)" if family.decoder else "on either side (and itself)"
        windows = "/".join(str(window) for window in dict.fromkeys(scoring[layer].window for layer in local))
        rest = [layer for layer in range(len(scoring)) if layer not in local]
        notes.append(
            f"Block{'s' if len(local) > 1 else ''} {_list(local)} {'are' if len(local) > 1 else 'is'} local: a query "
            f"sees only the keys fewer than {windows} positions away {sides}; the mask hides the rest."
            + (
                f" Block{'s' if len(rest) > 1 else ''} {_list(rest)} see{'' if len(rest) > 1 else 's'} every key."
                if rest
                else ""
            )
        )
    if getattr(config, "attn_logit_softcapping", None) is not None:
        notes.append(
            f"The config sets attn_logit_softcapping = {config.attn_logit_softcapping:g}, but this model's attention "
            "does not apply it: the scores are not capped."
        )
    block = model.base_model.get_submodule(f"{family.blocks}.0")
    linear = [module for module in block.modules() if isinstance(module, torch.nn.Linear)]
    if linear and all(module.bias is None for module in linear):
        notes.append("No projection has a bias: q = x·W_Q, k = x·W_K, v = x·W_V, and the same for W_O and the FFN.")
    return notes


def _frequencies(config) -> list[str]:
    """Where block types rotate by their own base frequency θ: which."""
    parameters = getattr(config, "rope_parameters", None) or {}
    thetas = {kind: values["rope_theta"] for kind, values in parameters.items() if isinstance(values, dict)}
    if len(set(thetas.values())) < 2:
        return []
    named = {"full_attention": "global", "sliding_attention": "local"}
    return [f"{named.get(kind, kind)} blocks by θ = {theta:,.0f}" for kind, theta in thetas.items()]


def _list(layers: list[int]) -> str:
    return ", ".join(str(layer) for layer in layers)
