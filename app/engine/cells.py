"""A view's attention at any length: the exact cells of a window, or the window pooled to a screen's
resolution, computed a chunk of query rows at a time, so that nothing quadratic in the tokens is ever held.

At 8,192 tokens one head's weights are 256 MiB and a block of 8 heads 2 GiB, more than a screen can show
or a browser can hold: like HiGlass's tiles of a Hi-C map, the page asks for what it draws. A pooled cell is
the largest of the cells its bin covers (max pooling, as torch's adaptive_max_pool2d bins them: bin i of S
over L cells is [⌊i·L/S⌋, ⌈(i+1)·L/S⌉)), so a strong weight never disappears from the overview; zoomed in,
the cells are exact, the whole block's to float32 rounding (Run.weight_rows).

A view (Plan) is a measure read row by row (the weights, or the norm-weighted ‖α·f(x)‖, a key's length times
its weight), of some heads of some blocks, each head alone or averaged over the heads (and over the blocks)
as app.engine.measures.mean_view averages whole matrices: in float64, then float32.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine import measures
from app.engine.capture import FUSED_FROM_BYTES
from app.engine.runs import ROW_CHUNK

ROW_MEASURES = ("weights", "norm")  # the measures a row follows from alone (ALTI decomposes whole blocks)
# A block past this (every head's weights) is read row by row; below it, whole blocks are computed once and
# kept (app.engine.blocks), as the pass below it runs eager attention (capture.FUSED_FROM_BYTES).
ROWS_FROM_BYTES = FUSED_FROM_BYTES
ROWS_WORK = 2**24  # cells of a measure one slice computes: 16 Mi, a short turn at the gate
PIECE_CELLS = 2**22  # cells a slice computes at once: 16 MiB in float32, under glibc's mmap threshold (32 MiB)
# Past this many cells (all its matrices together), an answer is sent pooled or not at all: 64 MiB in float32.
MAX_WINDOW_CELLS = 2**24


@dataclass(frozen=True)
class Plan:
    """Which matrices a view reads: a measure, blocks and heads, and how they combine. `mean`: None, each head
    alone ([layer, head, query, key]); "heads", each block's mean of the heads ([layer, 1, …]); "blocks", the
    mean of those over the blocks ([1, 1, …])."""

    measure: str
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    mean: str | None = None


@dataclass(frozen=True)
class Window:
    """The cells a view's answer holds: query rows × key columns, pooled to at most size × size (None: exact)."""

    rows: range
    cols: range
    size: int | None = None

    def shape(self) -> tuple[int, int]:
        """The answer's [query, key] cells: the window's, or its pooled bins."""
        rows, cols = len(self.rows), len(self.cols)
        return (rows, cols) if self.size is None else (min(rows, self.size), min(cols, self.size))

    @property
    def pooled(self) -> bool:
        return self.shape() != (len(self.rows), len(self.cols))


def bins(length: int, count: int) -> list[tuple[int, int]]:
    """Adaptive pooling's bins: `count` ranges over `length` cells, [⌊i·L/S⌋, ⌈(i+1)·L/S⌉)."""
    return [(i * length // count, -(-(i + 1) * length // count)) for i in range(count)]


# source(layer, heads, queries) -> a measure's rows of those heads, [head, query, key]: every key.
Source = Callable[[int, list[int], range], Tensor]


def combined_rows(source: Source, plan: Plan, queries: range) -> Tensor:
    """The plan's matrices' rows `queries` over every key: [layer, head, query, key] (one of each where it
    averages), averaged as measures.mean_view averages whole matrices."""
    per_layer = []
    for layer in plan.layers:
        rows = source(layer, list(plan.heads), queries)
        per_layer.append(rows if plan.mean is None else rows.double().mean(0, keepdim=True))
    if plan.mean == "blocks":
        return torch.stack(per_layer).mean(0).float()[None]
    if plan.mean == "heads":
        return torch.stack([rows.float() for rows in per_layer])
    return torch.stack(per_layer)


def window_slices(source: Source, plan: Plan, window: Window, n_keys: int) -> list[Callable[[], Tensor | None]]:
    """The window's cells (pooled where it is larger than its size) in slices of about ROWS_WORK cells of the
    measure each, whole chunks of ROW_CHUNK rows: the last slice returns them, [layer, head, query, key].
    A slice computes its rows a piece of about PIECE_CELLS at a time, pooled at once: its working memory
    stays in the heap that glibc reuses, where a whole slice's rows (64 MiB at 8,192 keys) would be pages
    mapped anew for every slice."""
    matrices = len(plan.layers) * len(plan.heads)
    out_rows, out_cols = window.shape()
    row_bins = bins(len(window.rows), out_rows)
    pooled_rows = len(row_bins) != len(window.rows)
    col_bins = None if out_cols == len(window.cols) else out_cols
    out: list[Tensor] = []

    def rows_for(cells: int) -> int:
        return max(ROW_CHUNK, cells // (matrices * n_keys) // ROW_CHUNK * ROW_CHUNK)

    def piece(bins_: list[tuple[int, int]]) -> Tensor:
        first, stop = bins_[0][0], bins_[-1][1]
        offset = window.rows.start
        rows = combined_rows(source, plan, range(offset + first, offset + stop))
        rows = rows[..., window.cols.start : window.cols.stop]
        if col_bins is not None:
            rows = pool_columns(rows, col_bins)
        if not pooled_rows:
            return rows
        return torch.stack([rows[..., a - first : b - first, :].amax(-2) for a, b in bins_], -2)

    def slice_of(group: list[tuple[int, int]], last: bool) -> Callable[[], Tensor | None]:
        @torch.inference_mode()
        def compute() -> Tensor | None:
            out.extend(piece(part) for part in spans(group, rows_for(PIECE_CELLS)))
            return torch.cat(out, -2) if last else None

        return compute

    groups = spans(row_bins, rows_for(ROWS_WORK))
    return [slice_of(group, index == len(groups) - 1) for index, group in enumerate(groups)]


def window_bytes(plan: Plan, window: Window, n_keys: int) -> int:
    """A window's peak memory, stated before it is computed (window_slices): its answer [layer, head, query,
    key] in float32, twice (its pieces, then joined), and one piece's rows of every matrix it reads over every
    key, with the scores they come from and their float64 means where it averages."""
    rows, cols = window.shape()
    answers = (1 if plan.mean == "blocks" else len(plan.layers)) * (1 if plan.mean else len(plan.heads))
    matrices = len(plan.layers) * len(plan.heads)
    piece_rows = max(ROW_CHUNK, PIECE_CELLS // (matrices * n_keys) // ROW_CHUNK * ROW_CHUNK)
    return 2 * answers * rows * cols * 4 + matrices * piece_rows * n_keys * 4 * 4


def spans(row_bins: list[tuple[int, int]], rows: int) -> list[list[tuple[int, int]]]:
    """Consecutive bins in groups whose rows fit `rows` (a bin alone may pass it)."""
    groups: list[list[tuple[int, int]]] = [[]]
    for start, stop in row_bins:
        if groups[-1] and stop - groups[-1][0][0] > rows:
            groups.append([])
        groups[-1].append((start, stop))
    return groups


def pool_columns(rows: Tensor, count: int) -> Tensor:
    """[…, key] max-pooled into `count` bins (bins): where they are all one width, as one reshaped maximum,
    several times faster than adaptive_max_pool1d, which also finds where each maximum lies."""
    width = rows.shape[-1]
    if width % count == 0:
        return rows.unflatten(-1, (count, width // count)).amax(-1)
    shape = rows.shape
    return torch.nn.functional.adaptive_max_pool1d(rows.reshape(-1, 1, width), count).reshape(*shape[:-1], count)


def row_source(run, model, measure: str) -> Source:
    """A row measure's rows computed from the run's q and k (Run.weight_rows), the norm-weighted ones times
    each key's ‖f_h(x_j)‖ (measures.norm, row by row: the same products)."""
    lengths: dict[int, Tensor] = {}

    def source(layer: int, heads: list[int], queries: range) -> Tensor:
        rows = run.weight_rows(layer, heads, queries)
        if measure == "weights":
            return rows
        if layer not in lengths:
            lengths[layer] = measures.transformed_values(run, model, layer).norm(dim=-1)  # [head, key]
        return rows * lengths[layer][heads][:, None, :]

    return source


def block_source(blocks: dict[int, Tensor]) -> Source:
    """Rows cut from whole blocks of a measure ({layer: [head, query, key]}), computed before."""
    return lambda layer, heads, queries: blocks[layer][heads, queries.start : queries.stop]


def check_window(window: Window, plan: Plan, n_tokens: int) -> None:
    """ValueError where the window is outside the matrix, empty, or too large to send exact."""
    for axis, cells in (("rows", window.rows), ("cols", window.cols)):
        if not 0 <= cells.start < cells.stop <= n_tokens:
            raise ValueError(
                f"{axis} {cells.start}:{cells.stop} is not a window of this run: from 0 up to {n_tokens} tokens, "
                f"start before stop"
            )
    rows, cols = window.shape()
    matrices = 1 if plan.mean == "blocks" else len(plan.layers) * (1 if plan.mean else len(plan.heads))
    if matrices * rows * cols > MAX_WINDOW_CELLS:
        raise ValueError(
            f"{matrices} × {rows:,} × {cols:,} cells are past the {MAX_WINDOW_CELLS:,} one answer holds: ask for "
            f"fewer heads, a smaller window, or pool it with size"
        )
