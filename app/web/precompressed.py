"""Static files compressed once per process instead of for every browser that loads the page.

The compression middleware compresses each answer as it goes out, on the event loop: plotly.js (4.8 MB)
held it at every page load, longest with brotli (a browser without zstd, as Safari on a phone), and a class
loading the page at once queued behind that. A file is compressed here the first time a browser asks for it
in an encoding, in a thread, at a level a per-answer compressor cannot afford, and kept (bench/README.md).
The middleware passes an answer that already has a Content-Encoding as it is.
"""

import asyncio
import gzip
import os
import threading

import brotli
import zstandard
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response

from app.web.compression import chosen_encoding

# What each encoding of app.web.compression compresses a file with, once.
COMPRESSORS = {
    "zstd": lambda data: zstandard.ZstdCompressor(level=9).compress(data),
    "br": lambda data: brotli.compress(data, quality=6),
    "gzip": lambda data: gzip.compress(data, 6, mtime=0),
}
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
DROPPED_HEADERS = (b"content-length", b"accept-ranges")


class CompressedFiles:
    """Compressed bodies of files, by path and encoding, each computed once while the file is unchanged."""

    def __init__(self):
        self._bodies: dict[tuple[str, str], tuple[tuple[int, int], bytes]] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    async def respond(self, response: Response, request_headers: Headers) -> Response:
        """The file answer compressed, when it is a whole compressible file and the client accepts an
        encoding; any other answer (304, a range, an image, an error) as it is."""
        if (
            not isinstance(response, FileResponse)
            or response.status_code != 200
            or "range" in request_headers
            or not (response.media_type or "").startswith(COMPRESSIBLE)
        ):
            return response
        encoding = chosen_encoding(request_headers.get("accept-encoding", ""))
        if encoding is None:
            return response
        stat = response.stat_result or os.stat(response.path)
        key, version = (str(response.path), encoding), (stat.st_mtime_ns, stat.st_size)
        kept = self._bodies.get(key)
        body = kept[1] if kept and kept[0] == version else await asyncio.to_thread(self.body, key, version)
        compressed = Response(body)
        # Ranges would count the file's bytes, not these: a client asks for ranges of the file as it is.
        kept_headers = [(name, value) for name, value in response.raw_headers if name not in DROPPED_HEADERS]
        compressed.raw_headers = [
            *kept_headers,
            (b"content-encoding", encoding.encode()),
            (b"vary", b"Accept-Encoding"),
            (b"content-length", str(len(body)).encode()),
        ]
        return compressed

    def body(self, key: tuple[str, str], version: tuple[int, int]) -> bytes:
        """The file compressed, once per version: threads asking meanwhile wait for that one."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            kept = self._bodies.get(key)
            if kept is None or kept[0] != version:
                path, encoding = key
                with open(path, "rb") as file:
                    kept = self._bodies[key] = (version, COMPRESSORS[encoding](file.read()))
        return kept[1]
