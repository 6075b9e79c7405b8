"""Activation patching's sites and hooks: input A run again with one activation taken from input B's run of the
same model, and what that changes in A's output (app.engine.patch_job checks a request and reads its effect).

A site is where the value is taken and put:
- `resid_pre`: the residual stream a block reads (its input);
- `attention_output`: the attention's output, concat(heads) · W_O, before it joins the stream;
- `head`: one head's context, its slice of W_O's input (what ablation zeroes, here replaced by B's);
- `ffn_output`: the FFN's output projection, before it joins the stream;
at one of A's positions (given B's partner position) or at all of them.

Cells are computed together: one padded pass holds A, B and one row of A per cell. Each site's hook copies
B's row into the cells' rows at that site, as B computes it in the same pass (B's row is never patched), so
B's values need no pass of their own. The effect is read from each row's output:
- an encoder's sentence vector (the model's pooling and pipeline), as its cosine with A's own and with B's;
- a decoder's next-token logits after A's last token: the logit difference of two tokens, or the
  probability of one.
"""

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.capture import Sequence, model_inputs, on_cpu, thread_hooks

SITES = ("resid_pre", "attention_output", "head", "ffn_output")


@dataclass(frozen=True)
class Cell:
    """One patch: B's value at `site` of block `layer` (head `head` for the head site) put into A, at A's
    `positions` from B's `sources` (pairwise)."""

    site: str
    layer: int
    head: int | None
    positions: tuple[int, ...]
    sources: tuple[int, ...]


def partner(position: int, n_a: int, n_b: int, align: str | None) -> int | None:
    """B's position that A's `position` takes its value from: the same index when the two have the same
    length or are aligned from the start, the same distance from the end when aligned there; None where B has
    no such position."""
    source = position - n_a + n_b if align == "end" else position
    return source if 0 <= source < n_b else None


def site_module(model: torch.nn.Module, family, site: str, layer: int) -> torch.nn.Module:
    """The module whose input (resid_pre, head) or output (attention_output, ffn_output) is the site."""
    block = f"{family.blocks}.{layer}"
    if site == "resid_pre":
        path = block
    elif site in ("attention_output", "head"):
        path = f"{block}.{family.attention_output}"
    else:
        (hook,) = [hook for hook in family.hooks(model.config) if hook.site == site]
        path = hook.module.format(block=block)
    return model.base_model.get_submodule(path)


def changing_input(change: Callable[[Tensor], Tensor]) -> Callable:
    """A pre-hook (with_kwargs) that gives a site module change(its input hidden states), whether its
    caller passed them by position or as `hidden_states` (transformers' blocks and W_O take either)."""

    def before(module, args, kwargs):
        if args:
            return (change(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": change(kwargs["hidden_states"])}

    return before


@contextmanager
def patching(model: torch.nn.Module, family, cells: list[Cell], first_row: int, source_row: int) -> Iterator[None]:
    """Hooks that put the source row's value at each cell's site into row first_row + i for cell i, during
    passes of the thread that set them; always removed."""
    n_heads = model.config.num_attention_heads
    by_module: dict[tuple[str, int], list[tuple[int, Cell]]] = {}
    for index, cell in enumerate(cells):
        by_module.setdefault((cell.site, cell.layer), []).append((first_row + index, cell))

    def put(value: Tensor, rows: list[tuple[int, Cell]], heads: bool) -> Tensor:
        patched = value.clone()
        if heads:  # [batch, pos, head, d_head]
            patched = patched.unflatten(-1, (n_heads, -1))
        for row, cell in rows:
            at = (list(cell.positions), cell.head) if heads else (list(cell.positions),)
            patched[(row, *at)] = patched[(source_row, list(cell.sources), *at[1:])]
        return patched.flatten(-2) if heads else patched

    with thread_hooks() as hook:
        for (site, layer), rows in by_module.items():
            module = site_module(model, family, site, layer)
            if site in ("resid_pre", "head"):
                change = functools.partial(put, rows=rows, heads=site == "head")
                hook(module, changing_input(change), before=True, with_kwargs=True, first=True)
            else:

                def after(module, args, out, rows=rows):
                    if isinstance(out, tuple):
                        return (put(out[0], rows, False), *out[1:])
                    return put(out, rows, False)

                hook(module, after, first=True)
        yield


def patched_outputs(
    model: torch.nn.Module,
    family,
    a: Sequence,
    b: Sequence,
    cells: list[Cell],
    read: Callable[[Tensor, int], Tensor],
    decoder: bool,
) -> list[Tensor]:
    """One padded pass of A, B and A patched by each cell: read(output row, row's length) for each row, A's
    and B's first, on the CPU. The output is the LM head's logits for a decoder, the base model's last hidden
    states for an encoder; `read` takes it on the model's device."""
    sequences = [a, b, *[a] * len(cells)]
    inputs = model_inputs(model, family, sequences)
    with torch.inference_mode(), patching(model, family, cells, first_row=2, source_row=1):
        out = model(**inputs).logits if decoder else model.base_model(**inputs).last_hidden_state
    lengths = [len(sequence.input_ids) for sequence in sequences]
    return [on_cpu(read(out[row, :length], length)) for row, length in enumerate(lengths)]
