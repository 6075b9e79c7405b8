"""A learner's device as a load tool (wrk, oha, k6) plays it: one keep-alive HTTP/1.1 connection from the
device's own address, its cookie, a browser's Accept-Encoding, and little CPU of its own.

In a class each device is a phone, and what it spends reading an answer is spent on the phone. On the bench
the 48 devices run on the lab's own two cores: httpx spends about 1.3 ms of CPU a request there (128 ms a
burst of 96 requests), time the server never spends in a class. This client spends a tenth of that, so a
burst timed with it is the lab's time; bench.py times the burst with httpx too, beside it.
"""

import asyncio
import json
from urllib.parse import urlsplit

import zstandard

CHROME_ACCEPT_ENCODING = "gzip, deflate, br, zstd"


class HttpError(RuntimeError):
    pass


class Device:
    """One device's connection: requests are sent one at a time, as a page's fetches to one origin are."""

    def __init__(self, base: str, address: str):
        parts = urlsplit(base)
        self.host, self.port, self.address = parts.hostname, parts.port, address
        self.cookie: str | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, local_addr=(self.address, 0))

    def close(self) -> None:
        self.writer.close()

    async def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return await self.request("GET", path)

    async def post_json(self, path: str, body: dict) -> tuple[int, dict[str, str], bytes]:
        return await self.request("POST", path, json.dumps(body).encode())

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            f"Accept-Encoding: {CHROME_ACCEPT_ENCODING}",
        ]
        if self.cookie:
            lines.append(f"Cookie: {self.cookie}")
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        status = int((await self.reader.readline()).split()[1])
        headers = await self._headers()
        content = await self._body(headers)
        encoding = headers.get("content-encoding")
        if encoding == "zstd":
            content = zstandard.ZstdDecompressor().decompressobj().decompress(content)
        elif encoding:
            raise HttpError(f"{path} came in {encoding}, which this client did not ask for")
        return status, headers, content

    async def _headers(self) -> dict[str, str]:
        headers = {}
        while (line := await self.reader.readline()) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "set-cookie" and self.cookie is None:
                self.cookie = value.split(";")[0]
            headers.setdefault(name, value)
        return headers

    async def _body(self, headers: dict[str, str]) -> bytes:
        if "content-length" in headers:
            return await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding") != "chunked":
            raise HttpError("an answer with neither a length nor chunks")
        pieces = []
        while size := int((await self.reader.readline()).strip(), 16):
            pieces.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()  # the empty trailer's line
        return b"".join(pieces)
