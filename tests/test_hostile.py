"""Hostile and odd input through the real HTTP app: a clear answer every time, never a 500."""

import numpy as np
import pytest

from app.web.pages import ASSETS_URL, PLOTLY_URL
from tests.float32 import tolerance

ROUTES = ["/", "/api/health", "/api/model", "/api/analyze", PLOTLY_URL, "/static/lab.css", f"{ASSETS_URL}/lab.css",
          "/docs", "/docs/start.js", "/docs/assets/swagger-ui.css"]  # fmt: skip


@pytest.fixture(scope="module")
def run_id(client):
    return client.post("/api/analyze", json={"text": "hostile input"}).json()["run_id"]


def run_routes(run_id):
    base = f"/api/runs/{run_id}"
    return [f"{base}/layers/0/heads/0", f"{base}/layers/0", f"{base}/embeddings", f"{base}/attention",
            f"{base}/tokens/0", f"{base}/layers/0/heads/0/queries/0"]  # fmt: skip


def test_an_oversized_body_is_refused_before_it_is_read(client):
    declared = client.post("/api/analyze", content=b"x" * (600 * 1024), headers={"content-type": "application/json"})
    assert declared.status_code == 413 and "larger than" in declared.json()["detail"]
    assert declared.headers["content-security-policy"].count("default-src") == 1

    def chunks():  # no Content-Length: the cap applies as the bytes arrive
        for _ in range(100):
            yield b"a" * 65536

    streamed = client.post("/api/analyze", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert client.get("/api/health").status_code == 200


@pytest.mark.parametrize("depth", [100, 5_000, 50_000])
def test_deeply_nested_json_is_422(client, depth):
    body = b'{"text": ' + b"[" * depth + b"]" * depth + b"}"
    response = client.post("/api/analyze", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422


CONTENT_TYPES = [
    "text/plain",
    "application/xml",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin-1",
    "",
]


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
def test_wrong_content_types(client, content_type):
    response = client.post("/api/analyze", content=b'{"text": "hello"}', headers={"content-type": content_type})
    assert response.status_code in (200, 422)  # JSON in any declared type is read as JSON, or refused as 422


@pytest.mark.parametrize(
    "text",
    [
        "nul\x00in the middle",
        "\x01\x02\x03 bell\x07 and escape\x1b[31m red",
        "tab\tnew\nline\rcarriage",
        "\u202eright-to-left override\u202c",
        "zero\u200bwidth\ufeffjoiners",
        "😀" * 10_000,
        "[MASK] " * 512,
        "[SEP]" * 512,
        "[CLS] [PAD] [UNK] [MASK] [SEP]",
        "ﷺ" * 3000,  # expands under NFKD
        "a\u0301" * 1000,  # combining accents
    ],
    ids=["nul", "control", "whitespace", "rtl-override", "zero-width", "10k-emoji", "512-mask", "512-sep", "specials",
         "ligature", "combining"],
)  # fmt: skip
def test_odd_text_is_analyzed_with_offsets_into_it(client, text):
    response = client.post("/api/analyze", json={"text": text})
    assert response.status_code == 200, response.text
    body = response.json()
    assert 3 <= len(body["tokens"]) <= 512
    for token in body["tokens"]:
        assert 0 <= token["start"] <= token["end"] <= len(text)
    head = client.get(f"/api/runs/{body['run_id']}/layers/5/heads/11").json()
    weights = np.array(head["weights"])
    np.testing.assert_allclose(weights.sum(1), 1, atol=tolerance(weights.shape[1]))


def test_special_token_strings_are_read_as_the_specials_they_name(client):
    tokens = client.post("/api/analyze", json={"text": "[MASK] " * 600}).json()["tokens"]
    assert len(tokens) == 512 and {t["text"] for t in tokens[1:-1]} == {"[MASK]"}
    assert all(t["special"] and t["end"] - t["start"] == 6 for t in tokens[1:-1])


def test_lone_surrogates_are_422(client):
    for escaped in (b"\\ud800", b"\\udfff", b"a\\ud83d b"):
        response = client.post(
            "/api/analyze", content=b'{"text": "' + escaped + b'"}', headers={"content-type": "application/json"}
        )
        assert response.status_code == 422 and "surrogate" in response.json()["detail"]


@pytest.mark.parametrize(
    "path",
    ["/api/runs/..%2F..%2Fetc%2Fpasswd/embeddings", "/api/runs/%2e%2e/embeddings", "/api/runs/%00/embeddings",
     "/api/runs/" + "a" * 5000 + "/embeddings", "/static/../app/settings.py", "/static/%2e%2e/app/settings.py",
     "/static/", "/static/js/", "/vendor/", "/api/runs/x/layers/0/heads/0/../../../../etc/passwd"],
)  # fmt: skip
def test_path_tricks_find_nothing(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert b"BaseSettings" not in response.content and b"root:" not in response.content


@pytest.mark.parametrize("layer, head", [(-1, 0), (0, -1), (6, 0), (0, 12), (2**63, 0), (0, 10**30), (-(10**30), 0)])
def test_negative_and_huge_layer_or_head_numbers(client, run_id, layer, head):
    response = client.get(f"/api/runs/{run_id}/layers/{layer}/heads/{head}")
    assert response.status_code == 404
    assert "0 to" in response.json()["detail"]
    assert client.get(f"/api/runs/{run_id}/layers/1.5/heads/0").status_code == 422
    assert client.get(f"/api/runs/{run_id}/attention", params={"layer": layer, "head": head}).status_code in (404, 422)


def test_every_route_answers_head_options_and_put_without_a_500(client, run_id):
    plain = {"Accept-Encoding": "identity"}  # the body's own length (compressed: tests/test_precompressed.py)
    for route in ROUTES + run_routes(run_id):
        head = client.head(route, headers=plain)
        if route == "/api/analyze":
            assert head.status_code == 405
        else:
            assert head.status_code == 200 and head.content == b"", route
            assert int(head.headers["content-length"]) == len(client.get(route, headers=plain).content)
        for method in ("OPTIONS", "PUT", "DELETE", "PATCH"):
            assert client.request(method, route).status_code == 405, (method, route)


def test_security_headers_on_every_kind_of_response(client, run_id):
    routes = ["/", "/api/health", "/static/js/main.js", PLOTLY_URL, "/nope", "/docs"]
    for route in [*routes, run_routes(run_id)[3]]:
        headers = client.get(route).headers
        assert headers["content-security-policy"].startswith("default-src 'self'")
        assert "script-src 'self';" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_the_model_folder_cannot_be_chosen_by_a_request(client):
    response = client.post("/api/analyze", json={"text": "hi", "model_path": "/etc"})
    assert response.status_code == 422
    assert (
        client.get("/api/model", params={"model_path": "/etc"}).json()["name"]
        == "sentence-transformers/all-MiniLM-L6-v2"
    )
