"""The compact binary form of all attention weights, for the browser.

The body is the C-order array [layer, head, query_pos, key_pos], little-endian, with no header of its
own; the response headers carry the shape and the dtype:
- uint8: byte = round(weight * 255); weight = byte / 255, off by at most 1/510.
- float16: IEEE half precision; off by at most 2^-11 relative (under 0.0005 for a weight in [0, 1]).
- float32: the exact weights.
"""

from typing import Literal

import numpy as np
import torch

AttentionDtype = Literal["uint8", "float16", "float32"]
UINT8_SCALE = 255
MEDIA_TYPE = "application/octet-stream"


def encode_attention(weights: torch.Tensor, dtype: AttentionDtype) -> tuple[bytes, dict[str, str]]:
    array = weights.numpy()  # [layer, head, query_pos, key_pos], float32 in [0, 1]
    if dtype == "uint8":
        encoded = np.rint(array * UINT8_SCALE).astype(np.uint8)
    else:
        encoded = array.astype("<f2" if dtype == "float16" else "<f4")
    headers = {"X-Attention-Shape": ",".join(map(str, array.shape)), "X-Attention-Dtype": dtype}
    if dtype == "uint8":
        headers["X-Attention-Scale"] = str(UINT8_SCALE)
    return encoded.tobytes(), headers


def decode_attention(body: bytes, headers: dict[str, str]) -> np.ndarray:
    """The inverse of encode_attention, as float32 (what a client does with the response)."""
    shape = tuple(int(n) for n in headers["X-Attention-Shape"].split(","))
    if headers["X-Attention-Dtype"] == "uint8":
        return (np.frombuffer(body, np.uint8).reshape(shape) / float(headers["X-Attention-Scale"])).astype(np.float32)
    little_endian = "<f2" if headers["X-Attention-Dtype"] == "float16" else "<f4"
    return np.frombuffer(body, little_endian).reshape(shape).astype(np.float32)
