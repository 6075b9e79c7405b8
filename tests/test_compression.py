"""The attention endpoint compresses its own answer, in the threads that encode it, for a client that
accepts zstd, brotli or gzip; decoded by each format's own library it is the identity answer byte for byte."""

import gzip

import brotli
import pytest
import zstandard

from app.web.encoding import PIECE_BYTES

SHORT = "The animal didn't cross the street because it was too tired."
LONG = " ".join(f"word{index}" for index in range(150))  # over 300 tokens: streamed in pieces


DECODERS = {
    "zstd": lambda body: zstandard.ZstdDecompressor().decompressobj().decompress(body),
    "br": brotli.decompress,
    "gzip": gzip.decompress,
}


def attention(client, run_id, accept_encoding, **params):
    """The answer's headers and its body as sent, not decoded."""
    headers = {"Accept-Encoding": accept_encoding}
    with client.stream("GET", f"/api/runs/{run_id}/attention", params=params, headers=headers) as response:
        assert response.status_code == 200
        return response.headers, b"".join(response.iter_raw())


@pytest.mark.parametrize("text", [SHORT, LONG], ids=["whole", "streamed"])
@pytest.mark.parametrize("encoding", ["zstd", "br", "gzip"])
def test_each_encoding_decodes_to_the_identity_body(client, text, encoding):
    run_id = client.post("/api/analyze", json={"text": text}).json()["run_id"]
    plain_headers, plain = attention(client, run_id, "identity")
    assert "content-encoding" not in plain_headers
    assert int(plain_headers["content-length"]) == len(plain)
    assert (len(plain) > PIECE_BYTES) == (text == LONG)
    headers, packed = attention(client, run_id, f"{encoding}, identity;q=0.5")
    assert headers["content-encoding"] == encoding
    assert headers["vary"] == "Accept-Encoding"
    assert len(packed) < len(plain) / (4 if text == LONG else 1.2)
    assert DECODERS[encoding](packed) == plain
    for header in ("X-Attention-Shape", "X-Attention-Dtype", "X-Attention-Scale", "X-Attention-Measure"):
        assert headers[header] == plain_headers[header]


def test_the_labs_preference_and_a_refused_encoding_are_followed(client):
    run_id = client.post("/api/analyze", json={"text": SHORT}).json()["run_id"]
    assert attention(client, run_id, "gzip, br, zstd")[0]["content-encoding"] == "zstd"
    assert attention(client, run_id, "gzip, zstd;q=0")[0]["content-encoding"] == "gzip"
    assert "content-encoding" not in attention(client, run_id, "compress")[0]


def test_an_answer_too_small_to_gain_goes_as_it_is(client):
    run_id = client.post("/api/analyze", json={"text": "hi"}).json()["run_id"]
    headers, one_head = attention(client, run_id, "zstd", layer=0, head=0)  # 3 × 3 bytes
    assert "content-encoding" not in headers and len(one_head) == 9
