"""Static files go out compressed once per file, not once per browser: the encodings a client accepts,
the file's own bytes once decoded, validators and caching as for the file itself."""

import asyncio
import gzip
import os

import brotli
import pytest
import zstandard
from starlette.datastructures import Headers
from starlette.responses import FileResponse

from app.web import compression, precompressed
from app.web.pages import ASSETS_URL, PLOTLY_JS, PLOTLY_URL, ROOT
from tests.conftest import run_async

DECODE = {"zstd": zstandard.ZstdDecompressor().decompress, "br": brotli.decompress, "gzip": gzip.decompress}


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip, deflate, br", "br"),  # Safari
        ("br;q=0.5, gzip", "br"),  # the lab's preference among those accepted, whatever their weights
        ("gzip;q=0, br;q=0", None),
        ("zstd;q=0, *", "br"),
        ("*;q=0", None),
        ("identity", None),
        ("", None),
        ("GZIP", "gzip"),
        ("br;q=oops, gzip", "gzip"),
    ],
)
def test_the_encoding_is_the_labs_best_that_the_client_accepts(accept, chosen):
    assert compression.chosen_encoding(accept) == chosen


@pytest.mark.parametrize("encoding", ["zstd", "br", "gzip"])
@pytest.mark.parametrize(
    ("url", "path"),
    [
        (PLOTLY_URL, PLOTLY_JS),
        (f"{ASSETS_URL}/js/main.js", ROOT / "static" / "js" / "main.js"),
        ("/static/lab.css", ROOT / "static" / "lab.css"),
    ],
)
def test_a_static_file_decodes_to_its_own_bytes_with_its_validators(client, url, path, encoding):
    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    with client.stream("GET", url, headers={"Accept-Encoding": encoding}) as packed:
        wire = b"".join(packed.iter_raw())
        headers = packed.headers
    assert plain.content == path.read_bytes()
    assert headers["content-encoding"] == encoding and "Accept-Encoding" in headers["vary"]
    assert DECODE[encoding](wire) == plain.content
    assert int(headers["content-length"]) == len(wire) < len(plain.content) / 2
    for validator in ("etag", "last-modified", "cache-control", "content-type"):
        assert headers[validator] == plain.headers[validator], validator
    assert "accept-ranges" not in headers  # ranges count the file's own bytes


def test_a_revalidation_a_range_and_head_are_answered_as_for_the_file(client):
    url = "/static/js/main.js"
    first = client.get(url, headers={"Accept-Encoding": "br"})
    again = client.get(url, headers={"Accept-Encoding": "br", "If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    part = client.get(url, headers={"Accept-Encoding": "br", "Range": "bytes=0-9"})
    assert part.status_code == 206 and "content-encoding" not in part.headers
    assert part.content == (ROOT / "static" / "js" / "main.js").read_bytes()[:10]
    head = client.head(PLOTLY_URL, headers={"Accept-Encoding": "br"})
    assert head.headers["content-encoding"] == "br" and head.content == b""
    assert (
        head.headers["content-length"]
        == client.get(PLOTLY_URL, headers={"Accept-Encoding": "br"}).headers["content-length"]
    )


def test_each_file_is_compressed_once_however_many_ask_at_a_time_and_again_when_it_changes(tmp_path, monkeypatch):
    compressed = []

    def counting(data: bytes) -> bytes:
        compressed.append(data)
        return gzip.compress(data)

    monkeypatch.setitem(precompressed.COMPRESSORS, "gzip", counting)
    path = tmp_path / "lesson.js"
    path.write_text("export const lesson = 'attention';\n" * 50)
    files = precompressed.CompressedFiles()
    asks = Headers({"accept-encoding": "gzip"})

    async def ask_at_once(count: int) -> list:
        answers = [files.respond(FileResponse(path, media_type="text/javascript"), asks) for _ in range(count)]
        return await asyncio.gather(*answers)

    answers = run_async(ask_at_once(8))
    assert len(compressed) == 1 and {gzip.decompress(answer.body) for answer in answers} == {path.read_bytes()}
    path.write_text("export const lesson = 'heads';\n" * 50)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    (answer,) = run_async(ask_at_once(1))
    assert len(compressed) == 2 and gzip.decompress(answer.body) == path.read_bytes()
