"""The binary attention encoding: round trips within the documented bounds."""

import numpy as np
import torch

from app.web.encoding import decode_attention, encode_attention


def encode(blocks, dtype, size=None) -> tuple[bytes, dict[str, str]]:
    """The whole body, as a client receives it, and the headers."""
    pieces, headers = encode_attention(blocks, dtype, size)
    body = b"".join(pieces)
    assert len(body) == int(headers["Content-Length"])
    return body, headers


def softmax_blocks(layers=2, heads=3, n=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(heads, n, n, generator=generator).mul(3).softmax(-1) for _ in range(layers)]


def test_uint8_is_within_half_a_step():
    blocks = softmax_blocks()
    body, headers = encode(blocks, "uint8")
    assert len(body) == 2 * 3 * 7 * 7 and headers["X-Attention-Shape"] == "2,3,7,7"
    error = np.abs(decode_attention(body, headers) - torch.stack(blocks).numpy()).max()
    assert error <= 0.5 / 255 + 1e-7


def test_uint8_keeps_exact_zeros_and_ones():
    block = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    decoded = decode_attention(*encode([block], "uint8"))
    assert decoded[0, 0, 0, 0] == 1.0 and decoded[0, 0, 0, 1] == 0.0
    assert abs(decoded[0, 0, 1, 0] - 0.5) <= 0.5 / 255 + 1e-7  # a tie: rounds half up


def test_uint8_bytes_are_the_float64_rounding_of_every_cell_large_or_cut_from_a_batch():
    """Matrices larger than one encoding chunk, and a batch's parts (non-contiguous views), byte for byte
    against floor(w·255 + 0.5) in float64, half-step values included."""
    generator = torch.Generator().manual_seed(1)
    batch = torch.randn(2, 3, 600, 600, generator=generator).mul(4).softmax(-1)  # [batch, head, query, key]
    batch[1, 2, 0, :4] = torch.tensor([0.8215686082839966, 0.5 / 255, 1.5 / 255, 254.5 / 255])
    for part in (batch[0], batch[1, :, :590, :590]):  # a run alone, and one cut from the batch
        body, _ = encode([part, part.flip(0)], "uint8")
        cells = torch.stack([part, part.flip(0)]).double().numpy()
        assert body == np.floor(cells * 255 + 0.5).astype(np.uint8).tobytes()


def test_float16_is_within_its_relative_bound_and_float32_is_exact():
    blocks = softmax_blocks(seed=1)
    exact = torch.stack(blocks).numpy()
    half = decode_attention(*encode(blocks, "float16"))
    assert np.all(np.abs(half - exact) <= exact * 2**-11 + 2**-24)
    assert np.array_equal(decode_attention(*encode(blocks, "float32")), exact)  # bit for bit: read back (encoded)


def test_the_body_is_little_endian_c_order():
    block = torch.tensor([[[0.25, 0.75], [1.0, 0.0]]])
    body, _ = encode([block], "float32")
    assert body == np.array([0.25, 0.75, 1.0, 0.0], dtype="<f4").tobytes()


def test_thumbnails_keep_each_blocks_largest_weight():
    blocks = softmax_blocks(layers=1, heads=1, n=8)
    body, headers = encode(blocks, "float32", size=4)
    assert headers["X-Attention-Shape"] == "1,1,4,4"
    small = decode_attention(body, headers)[0, 0]
    expected = blocks[0][0].reshape(4, 2, 4, 2).amax(dim=(1, 3)).numpy()
    assert np.array_equal(small, expected)  # bit for bit: no rounding (a max)
    _, unchanged = encode(blocks, "uint8", size=64)
    assert unchanged["X-Attention-Shape"] == "1,1,8,8"
