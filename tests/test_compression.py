"""The attention endpoint compresses its own answer, in the threads that encode it, for a client that
accepts zstd, brotli or gzip; decoded by each format's own library it is the identity answer byte for byte."""

import gzip

import brotli
import pytest
import zstandard
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import get_settings
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


@pytest.fixture(scope="module")
def behind_proxy(minilm):
    """The lab behind a trusted proxy at 127.0.0.9: each request names its client in X-Forwarded-For."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTENTION_LAB_TRUSTED_PROXIES", "127.0.0.9")
        patch.setenv("ATTENTION_LAB_RESERVE_BYTES", "0")
        get_settings.cache_clear()
        with TestClient(create_app(minilm), client=("127.0.0.9", 40000)) as test_client:
            yield test_client
    get_settings.cache_clear()


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.7", "::1", "::ffff:127.0.0.1"])
def test_a_client_on_the_labs_own_machine_gets_the_body_as_it_is(behind_proxy, address):
    """Over loopback compressing costs more than the bytes it saves (app.web.compression)."""
    forwarded = {"X-Forwarded-For": address}
    run_id = behind_proxy.post("/api/analyze", json={"text": LONG}, headers=forwarded).json()["run_id"]
    headers = {"Accept-Encoding": "zstd, br, gzip", **forwarded}
    with behind_proxy.stream("GET", f"/api/runs/{run_id}/attention", headers=headers) as response:
        body = b"".join(response.iter_raw())
    assert "content-encoding" not in response.headers
    assert int(response.headers["content-length"]) == len(body) > PIECE_BYTES
    assert response.headers["vary"] == "Accept-Encoding"


def test_a_client_elsewhere_behind_the_proxy_gets_it_compressed(behind_proxy):
    forwarded = {"X-Forwarded-For": "192.0.2.7"}
    run_id = behind_proxy.post("/api/analyze", json={"text": LONG}, headers=forwarded).json()["run_id"]
    headers = {"Accept-Encoding": "zstd", **forwarded}
    with behind_proxy.stream("GET", f"/api/runs/{run_id}/attention", headers=headers) as response:
        packed = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "zstd"
    plain = behind_proxy.get(f"/api/runs/{run_id}/attention", headers={**forwarded, "Accept-Encoding": "identity"})
    assert DECODERS["zstd"](packed) == plain.content
