"""The patch job, what a patching request asks (POST /api/patch): its cells checked, its passes as slices at
turns of the gate, and the effect read from each row (app.engine.patch_sites has the hooks and the pass)."""

from collections.abc import Callable

import torch
from torch import Tensor
from transformers import PreTrainedModel

from app.engine.capture import Sequence
from app.engine.engine import BATCH_TOKENS, Engine
from app.engine.errors import InvalidInput
from app.engine.model import upcast_bytes
from app.engine.patch_sites import SITES, Cell, partner, patched_outputs
from app.engine.placement import dtype_name

ALIGNS = ("start", "end")


def cells_of(
    site: str,
    layer: int | None,
    head: int | None,
    position: int | None,
    sweep: str | None,
    n_layers: int,
    n_heads: int,
    pairs: dict[int, int],
) -> list[Cell]:
    """The cells a request asks for, checked: one, or a sweep over every block × position (one position
    each) or every block × head (the head site). `pairs`: A's positions that have a partner in B, and it."""
    if site not in SITES:
        raise InvalidInput(f"no site {site!r}: the sites are {', '.join(SITES)}")
    if sweep == "blocks_heads" and site != "head":
        raise InvalidInput("a sweep over blocks × heads patches the head site: give site=head")
    if sweep is not None and layer is not None:
        raise InvalidInput("a sweep goes over every block: give no layer")
    if sweep == "blocks_positions" and position is not None:
        raise InvalidInput("a sweep over blocks × positions goes over every position: give no position")
    if sweep is None and layer is None:
        raise InvalidInput("give the block to patch (layer), or a sweep")
    if layer is not None and not 0 <= layer < n_layers:
        raise InvalidInput(f"no block {layer}: blocks are 0 to {n_layers - 1}")
    if site == "head" and sweep != "blocks_heads" and head is None:
        raise InvalidInput("the head site needs the head to patch")
    if (site != "head" or sweep == "blocks_heads") and head is not None:
        raise InvalidInput("give a head only for the head site, outside a sweep over heads")
    if head is not None and not 0 <= head < n_heads:
        raise InvalidInput(f"no head {head}: heads are 0 to {n_heads - 1}")
    if position is not None and position not in pairs:
        raise InvalidInput(f"A's position {position} has no partner in B (or does not exist)")
    chosen = sorted(pairs) if position is None else [position]
    layers = range(n_layers) if sweep is not None else [layer]
    if sweep == "blocks_positions":
        return [Cell(site, at, head, (p,), (pairs[p],)) for at in layers for p in sorted(pairs)]
    positions, sources = tuple(chosen), tuple(pairs[p] for p in chosen)
    heads = range(n_heads) if sweep == "blocks_heads" else [head]
    return [Cell(site, at, one, positions, sources) for at in layers for one in heads]


def patch_job(
    engine: Engine,
    text: str,
    source: str,
    site: str,
    layer: int | None = None,
    head: int | None = None,
    position: int | None = None,
    sweep: str | None = None,
    align: str | None = None,
    target_tokens: list[int] | None = None,
    max_cell_tokens: int | None = None,
    model: PreTrainedModel | None = None,
) -> list[Callable[[], dict | None]]:
    """A patching request, checked here and now (its texts, cells and cost), and its work as slices to run one
    after another, the last of which returns the answer. Each slice is one padded pass of at most
    BATCH_TOKENS tokens (A, B and as many cells as fit; at least one). The whole costs about
    (cells + 2) × the longer input's tokens, at most max_cell_tokens. `model`: the one the passes run (the
    served one by default; its float32 copy, app.engine.model.upcast)."""
    loaded = engine.loaded
    family, model = loaded.family, model or loaded.model
    if family.attention_only:
        raise InvalidInput(f"nothing can be patched: {engine.info['attention_only']}")
    for checked in (text, source):
        engine.spec(checked)  # the same character cap as any run
    decoder = family.decoder
    limit = None if decoder else loaded.max_seq_length  # an encoder's sentence vector reads what its pooling reads
    a_tokens, _ = engine.tokenize(text, None, limit)
    b_tokens, _ = engine.tokenize(source, None, limit)
    n_a, n_b = len(a_tokens), len(b_tokens)
    listed = lambda tokens: "[" + ", ".join(token.text for token in tokens) + "]"  # noqa: E731
    if n_a != n_b and align is None:
        raise InvalidInput(
            f"A has {n_a} tokens {listed(a_tokens)} and B has {n_b} {listed(b_tokens)}: positions are paired only "
            "where you say so: give align=start or align=end (e.g. end pairs the last tokens)"
        )
    if align is not None and align not in ALIGNS:
        raise InvalidInput(f"align is one of {', '.join(ALIGNS)}")
    pairs = {p: q for p in range(n_a) if (q := partner(p, n_a, n_b, align)) is not None}
    config = model.config
    cells = cells_of(site, layer, head, position, sweep, config.num_hidden_layers, config.num_attention_heads, pairs)
    longest = max(n_a, n_b)
    cost = (len(cells) + 2) * longest
    if max_cell_tokens is not None and cost > max_cell_tokens:
        raise InvalidInput(
            f"patching costs (cells + 2) × tokens: ({len(cells)} + 2) × {longest} = {cost:,} is past this lab's "
            f"bound of {max_cell_tokens:,}; patch one block or head, or shorter texts"
        )
    target = next_token_target(engine, target_tokens) if decoder else {"kind": "cosine"}
    pooling = loaded.default_pooling
    pipeline = loaded.pipeline.to(model.device)  # it reads the pass's output where the pass is

    def read(output: Tensor, length: int) -> Tensor:
        if decoder:
            return output[length - 1]  # the logits of the token after the row's last: [vocab]
        return pipeline.stages(output, pooling)[-1].vector  # the sentence vector: [size]

    a, b = (sequence_of(engine, tokens) for tokens in (a_tokens, b_tokens))
    per_pass = max(1, BATCH_TOKENS // longest - 2)
    chunks = [cells[start : start + per_pass] for start in range(0, len(cells), per_pass)]
    outputs: list[Tensor] = []
    own: list[Tensor] = []

    def compute(chunk: list[Cell]) -> None:
        rows = patched_outputs(model, family, a, b, chunk, read, decoder)
        own[:] = rows[:2]
        outputs.extend(rows[2:])

    def answer() -> dict:
        if decoder and target["token_ids"] is None:  # B's most likely next token against A's other than it
            first = int(own[1].argmax())
            target["token_ids"] = [first, next(int(token) for token in own[0].topk(2).indices if token != first)]
            target["tokens"] = engine.pieces(target["token_ids"])
        effect = (lambda row: decoder_effect(row, target)) if decoder else (lambda row: cosines(row, own))
        return {
            "computed_in": dtype_name(model.dtype),
            "model_dtype": loaded.dtype,
            "a_tokens": a_tokens,
            "b_tokens": b_tokens,
            "align": align,
            "target": target,
            "a": effect(own[0]),
            "b": effect(own[1]),
            "cells": [
                {
                    "site": cell.site,
                    "layer": cell.layer,
                    "head": cell.head,
                    "positions": list(cell.positions),
                    "sources": list(cell.sources),
                    **effect(row),
                }
                for cell, row in zip(cells, outputs, strict=True)
            ],
        }

    return [*(lambda chunk=chunk: compute(chunk) for chunk in chunks), answer]


def patch_bytes(engine: Engine, tokens: int) -> int:
    """Patching's peak memory, stated before it starts: a padded pass of as many cells as a slice holds, the run of
    input A it patches, and the model's float32 copy where it is in half precision."""
    nbytes = engine.footprint.transient_bytes(BATCH_TOKENS // tokens + 2, tokens) + engine.footprint.run_bytes(tokens)
    return nbytes + upcast_bytes(engine.loaded)


def sequence_of(engine: Engine, tokens) -> Sequence:
    return Sequence(
        torch.tensor([token.id for token in tokens]),
        torch.tensor([token.token_type for token in tokens]),
        engine.loaded.family.native_mask,
    )


def next_token_target(engine: Engine, token_ids: list[int] | None) -> dict:
    """A decoder's target: two tokens' logit difference (the first's minus the second's), one token's
    probability, or by default the logit difference of B's most likely next token and A's most likely other
    token (filled in once both are read)."""
    vocab = engine.loaded.model.config.vocab_size
    if token_ids is not None:
        if len(token_ids) not in (1, 2) or not all(0 <= token < vocab for token in token_ids):
            raise InvalidInput(f"target_tokens: one or two vocabulary ids (0 to {vocab - 1})")
        kind = "probability" if len(token_ids) == 1 else "logit_difference"
        return {"kind": kind, "token_ids": list(token_ids), "tokens": engine.pieces(list(token_ids))}
    return {"kind": "logit_difference", "token_ids": None, "tokens": None}


def decoder_effect(logits: Tensor, target: dict) -> dict:
    """The target read from the logits after A's last token, in float64."""
    logits = logits.double()
    if target["kind"] == "probability":
        return {"value": float(logits.softmax(-1)[target["token_ids"][0]])}
    first, second = target["token_ids"]
    return {"value": float(logits[first] - logits[second])}


def cosines(vector: Tensor, own: list[Tensor]) -> dict:
    """An encoder's target: the sentence vector's cosine with B's (the value) and with A's, in float64."""
    unit = lambda v: v.double() / v.double().norm()  # noqa: E731
    return {"value": float(unit(vector) @ unit(own[1])), "to_a": float(unit(vector) @ unit(own[0]))}
