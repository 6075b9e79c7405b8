"""Which encoding a client gets, and answers compressed as they are made.

The compression middleware compresses an answer on the event loop, as it goes out. The attention matrices
are compressed by the thread that encodes them instead, piece by piece as they stream: at 512 tokens the
18.9 MB of uint8 weights held the event loop for each answer, every other request waiting meanwhile. zstd
level 1 compresses these bytes both faster and smaller than 4. The middleware passes an answer that has a
Content-Encoding as it is.

A client on the server's own machine gets the matrices uncompressed (app.web.api.attention): over loopback
the bytes cost less than compressing and decoding them (bench/floor.py's replay server). A writing's stream
carries a step's attention rows in every event and follows the same policy (app.web.writing): its events are
compressed in a thread for a client elsewhere and sent plain to one on this machine, past the middleware
(app.web.middleware.Compress). The small JSON answers stay compressed by the middleware, which costs little.
The figures: bench/README.md.
"""

import asyncio
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator

import brotli
import zstandard

MIN_BYTES = 500  # an answer smaller than this goes as it is (as in the middleware): a header would outweigh it


def chosen_encoding(accept_encoding: str) -> str | None:
    """The first of STREAMS the Accept-Encoding header allows (a q of 0 refuses an encoding)."""
    weights = {}
    for part in accept_encoding.lower().split(","):
        name, _, parameters = part.partition(";")
        weight = 1.0
        for parameter in parameters.split(";"):
            key, _, value = parameter.strip().partition("=")
            if key == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights[name.strip()] = weight
    return next((name for name in STREAMS if weights.get(name, weights.get("*", 0.0)) > 0), None)


Stream = tuple[Callable[[bytes], bytes], Callable[[], bytes], Callable[[], bytes]]  # compress, flush, finish


def _zstd() -> Stream:
    stream = zstandard.ZstdCompressor(level=1).compressobj()
    return stream.compress, lambda: stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK), stream.flush


def _brotli() -> Stream:
    stream = brotli.Compressor(quality=4)
    return stream.process, stream.flush, stream.finish


def _gzip() -> Stream:
    stream = zlib.compressobj(4, wbits=31)  # 31: a gzip header and trailer
    return stream.compress, lambda: stream.flush(zlib.Z_SYNC_FLUSH), stream.flush


# The lab's preference among what a client accepts, best first.
STREAMS: dict[str, Callable[[], Stream]] = {"zstd": _zstd, "br": _brotli, "gzip": _gzip}


def compressed(pieces: Iterable[bytes], encoding: str) -> Iterator[bytes]:
    """The pieces as one compressed stream, each flushed as it is made: the client decodes a piece while
    the next is encoded."""
    compress, flush, finish = STREAMS[encoding]()
    for piece in pieces:
        yield compress(piece) + flush()
    yield finish()


async def compressed_as_they_come(pieces: AsyncIterable[str], encoding: str) -> AsyncIterator[bytes]:
    """The pieces of a stream as one compressed stream, each compressed in a thread and flushed as it comes:
    off the event loop, which every other request needs meanwhile."""
    compress, flush, finish = STREAMS[encoding]()

    def flushed(piece: str) -> bytes:
        return compress(piece.encode()) + flush()

    async for piece in pieces:
        yield await asyncio.to_thread(flushed, piece)
    yield finish()
