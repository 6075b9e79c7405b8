"""A hostile learner's requests beside an ordinary one, over real sockets, each device from its own loopback
address, against one `python -m app` (the tiny model, no reserve of memory: neither changes what is tested):
bodies past the limit on kept-alive connections, progress of ids the lab never named, the pasted corpus the
docs promise, a flood of corpora named and never computed, and index starts whose corpus is read beside a
learner's health check."""

import asyncio
import re
import threading
from pathlib import Path

import pytest

from tests.class_client import device
from tests.conftest import LabProcess, run_async
from tests.floods import connect

pytestmark = pytest.mark.slow

DOCS = Path(__file__).parent.parent / "docs"
BODY_LIMIT = 512 * 1024  # ATTENTION_LAB_MAX_BODY_BYTES's default
UNKNOWN_ID = "a" * 26  # a well-formed id the lab never named


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir):
    lab = LabProcess(
        tmp_path_factory.mktemp("hostile-requests"),
        env={"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir), "ATTENTION_LAB_RESERVE_BYTES": "0"},
    )
    lab.start()
    yield lab
    lab.stop()


def new_in_log(lab: LabProcess, seen: int) -> str:
    return lab.log.read_bytes()[seen:].decode(errors="replace")


def test_bodies_past_the_limit_on_kept_alive_connections_answer_413_and_nothing_else(lab):
    """Six devices each send 540 KB bodies one after another on a kept-alive connection, and one sends two of
    them back to back on one socket (the second's head arriving with the first's last bytes): each is answered
    413 or its connection closed after the first answer, never 431 (the body read as if it were headers), and
    the lab's log has no traceback of an answer written after its connection's end."""
    seen = lab.log.stat().st_size
    body = b'{"text": "' + b"x" * 540_000 + b'"}'
    headers = {"content-type": "application/json"}

    def sender(n: int) -> list[int]:
        with device(f"127.0.6.{n + 1}") as client:
            return [client.post(f"{lab.url}/api/analyze", content=body, headers=headers).status_code for _ in range(6)]

    async def pipelined() -> list[int]:
        reader, writer = await connect(lab.port, "127.0.6.99")
        head = "POST /api/analyze HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
        request = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        writer.write(request + request)
        statuses = []
        try:
            while len(statuses) < 2:
                line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
                statuses.append(int(line.split()[1]))
                answer_head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"content-length: (\d+)", answer_head, re.I)[1])
                await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # closed after an answer: the client sends again on a new connection
        writer.close()
        return statuses

    results: list[list[int]] = [[] for _ in range(6)]
    threads = [threading.Thread(target=lambda n=n: results[n].extend(sender(n))) for n in range(6)]
    for thread in threads:
        thread.start()
    raw = run_async(pipelined())
    for thread in threads:
        thread.join()
    statuses = [status for result in results for status in result]
    assert statuses == [413] * 36, statuses
    assert raw and set(raw) == {413}, raw
    log = new_in_log(lab, seen)
    assert "Traceback" not in log and "write_eof" not in log, log[-3000:]


def test_the_progress_of_an_id_the_lab_never_named_is_404(lab):
    """docs/search.md: an unknown or expired index answers 404; the atlas's progress as its route says. A
    named index or atlas that nobody computes is "not running"."""
    with device("127.0.8.1") as client:
        for path in (f"/api/search/index/{UNKNOWN_ID}/progress", f"/api/atlas/{UNKNOWN_ID}/progress"):
            response = client.get(f"{lab.url}{path}")
            assert response.status_code == 404, (path, response.text)
            assert UNKNOWN_ID in response.json()["detail"]
        index = client.post(f"{lab.url}/api/search/index", json={"documents": "one\ntwo"}).json()["index_id"]
        atlas = client.post(f"{lab.url}/api/atlas", json={"sentences": "One.\nTwo."}).json()["atlas_id"]
        for path in (f"/api/search/index/{index}/progress", f"/api/atlas/{atlas}/progress"):
            response = client.get(f"{lab.url}{path}")
            assert response.status_code == 200 and response.json()["state"] == "not running", response.text


def documented_corpora() -> list[tuple[int, int]]:
    """Every (documents, characters each) docs/search.md says a pasted corpus may have."""
    text = " ".join((DOCS / "search.md").read_text().split())
    said = text[text.index("A pasted corpus") :].split("\n\n")[0][:600]
    pairs = re.findall(r"([\d,]+) documents of (?:at most )?([\d,]+) characters", said)
    assert pairs, said
    return [(int(documents.replace(",", "")), int(chars.replace(",", ""))) for documents, chars in pairs]


def test_the_pasted_corpus_the_docs_promise_can_be_sent(lab):
    """Each corpus size docs/search.md promises is accepted as one request, within the lab's body limit; a
    corpus past the limit is refused at once, naming the bound."""
    with device("127.0.8.2") as client:
        for documents, chars in documented_corpora():
            corpus = "\n".join(f"{n:05d}" + "x" * (chars - 5) for n in range(documents))
            response = client.post(f"{lab.url}/api/search/index", json={"documents": corpus})
            assert response.status_code == 200, (documents, chars, response.status_code, response.text[:200])
            assert response.json()["documents"] == documents
        past = client.post(f"{lab.url}/api/search/index", json={"documents": "y" * 2000 + "\n" * (BODY_LIMIT // 2)})
        assert past.status_code == 413 and "ATTENTION_LAB_MAX_BODY_BYTES" in past.json()["detail"], past.text[:200]
