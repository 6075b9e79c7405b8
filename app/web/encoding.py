"""The compact binary form of all attention weights, for the browser.

The body is the C-order array [layer, head, query_pos, key_pos], little-endian, with no header of its
own; the response headers carry the shape and the dtype:
- uint8: byte = round(weight * 255), rounded in float64; weight = byte / 255, off by at most 1/510.
- float16: IEEE half precision; off by at most 2^-12 (absolute) for a weight in [0, 1]. Relative precision
  holds only down to 6.1e-5, float16's smallest normal number: below it fewer bits remain, and a weight
  under 3e-8 (half the smallest subnormal) becomes 0.
- float32: the exact weights.
"""

from collections.abc import Iterator
from math import prod
from typing import Literal

import numpy as np
import orjson
import torch
from fastapi import Response

AttentionDtype = Literal["uint8", "float16", "float32"]
ITEM_BYTES = {"uint8": 1, "float16": 2, "float32": 4}
UINT8_SCALE = 255
PIECE_BYTES = 1024 * 1024  # heads are sent in pieces of about this size: few for a small body, bounded for a large
MEDIA_TYPE = "application/octet-stream"
UINT8_CHUNK = 512 * 512  # values encoded to uint8 at once: 2 MB of float64


def encode_attention(
    blocks: list[torch.Tensor], dtype: AttentionDtype, size: int | None = None, top: float = 1.0
) -> tuple[Iterator[bytes], dict[str, str]]:
    """blocks: one [head, query_pos, key_pos] float32 tensor per layer, values in [0, top] (weights: 1).
    uint8 maps [0, top] onto 0–255: value = byte / X-Attention-Scale, with the scale 255 / top.

    The body comes in pieces of whole heads of about PIECE_BYTES, encoded as they are sent: a 512-token
    run in float32 (75 MB) is never held whole, and a client that reads slowly holds back the encoding
    of the rest.
    With `size`, each matrix larger than size×size is shrunk to it by keeping the largest weight of each
    block of cells: what an overview of small pictures draws, so nothing strong disappears.
    """
    if size is not None and blocks[0].shape[-1] > size:
        blocks = [torch.nn.functional.adaptive_max_pool2d(block, size) for block in blocks]
    shape = (len(blocks), *blocks[0].shape)
    headers = {
        "X-Attention-Shape": ",".join(map(str, shape)),
        "X-Attention-Dtype": dtype,
        "Content-Length": str(prod(shape) * ITEM_BYTES[dtype]),
    }
    scale = UINT8_SCALE / top if top > 0 else UINT8_SCALE
    if dtype == "uint8":
        headers["X-Attention-Scale"] = str(int(scale)) if scale == int(scale) else repr(scale)
    return _pieces(blocks, dtype, scale), headers


def _pieces(blocks: list[torch.Tensor], dtype: AttentionDtype, scale: float) -> Iterator[bytes]:
    """Consecutive heads, as many as fill about PIECE_BYTES, each piece encoded in one operation: whole
    blocks stacked while a block fits in a piece, else heads of one block. Slices, not a tensor per head:
    making 72 tensors took half as long as encoding a short run itself."""
    n_heads, head_bytes = len(blocks[0]), blocks[0][0].numel() * ITEM_BYTES[dtype]
    per_piece = max(1, PIECE_BYTES // head_bytes)
    if per_piece >= n_heads:
        per_stack = per_piece // n_heads
        for start in range(0, len(blocks), per_stack):
            yield _encode(torch.stack(blocks[start : start + per_stack]), dtype, scale)
        return
    for block in blocks:
        for start in range(0, n_heads, per_piece):
            yield _encode(block[start : start + per_piece], dtype, scale)


def _encode(matrices: torch.Tensor, dtype: AttentionDtype, scale: float) -> bytes:
    if dtype == "uint8":
        return _uint8(on_wire(matrices).numpy(), scale).tobytes()
    return on_wire(matrices).numpy().astype("<f2" if dtype == "float16" else "<f4", copy=False).tobytes()


def on_wire(values: torch.Tensor) -> torch.Tensor:
    """A model's numbers as they are sent: a bfloat16 or float16 model's upcast to float32, which holds each of
    them exactly (NumPy has no bfloat16); float32 and float64 as they are."""
    return values.float() if values.dtype in (torch.bfloat16, torch.float16) else values


def _uint8(values: np.ndarray, scale: float) -> np.ndarray:
    """round(value · scale), half up, for values >= 0: +0.5, then truncation. In float64: in float32,
    w·255 + 0.5 can round up past a half-step (0.8215686082839966 gave byte 210, 1.96e-3 off). A few
    matrices at a time, so that their float64 copy stays in the cache: about half the time of one float64
    copy of each piece in torch (bench/README.md)."""
    matrices = values.reshape(-1, *values.shape[-2:])
    encoded = np.empty(matrices.shape, np.uint8)
    step = max(1, UINT8_CHUNK // matrices[0].size)
    for start in range(0, len(matrices), step):
        wide = matrices[start : start + step].astype(np.float64)
        wide *= scale
        wide += 0.5
        encoded[start : start + step] = wide  # the cast truncates
    return encoded


def decode_attention(body: bytes, headers: dict[str, str]) -> np.ndarray:
    """The inverse of encode_attention, as float32 (what a client does with the response)."""
    shape = tuple(int(n) for n in headers["X-Attention-Shape"].split(","))
    if headers["X-Attention-Dtype"] == "uint8":
        return (np.frombuffer(body, np.uint8).reshape(shape) / float(headers["X-Attention-Scale"])).astype(np.float32)
    little_endian = "<f2" if headers["X-Attention-Dtype"] == "float16" else "<f4"
    return np.frombuffer(body, little_endian).reshape(shape).astype(np.float32)


class NumbersResponse(Response):
    """JSON straight from float32 tensors (a bfloat16 or float16 model's upcast, numbers): orjson writes each
    float32 exactly, and fast."""

    media_type = "application/json"

    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
