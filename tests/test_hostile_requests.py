"""A hostile learner's requests beside an ordinary one, over real sockets, each device from its own loopback
address, against one `python -m app` (the tiny model, no reserve of memory: neither changes what is tested):
bodies past the limit on kept-alive connections, progress of ids the lab never named, the pasted corpus the
docs promise, a flood of corpora named and never computed, and index starts whose corpus is read beside a
learner's health check."""

import asyncio
import json
import multiprocessing
import re
import threading
import time
from pathlib import Path

import pytest

from tests.class_client import device
from tests.conftest import LabProcess, run_async
from tests.floods import connect

pytestmark = pytest.mark.slow

DOCS = Path(__file__).parent.parent / "docs"
BODY_LIMIT = 512 * 1024  # ATTENTION_LAB_MAX_BODY_BYTES's default
UNKNOWN_ID = "a" * 26  # a well-formed id the lab never named
JSON = {"content-type": "application/json"}


MIB = 1024**2
CORPUS_BYTES_PER_HOUR = 4 * MIB  # ATTENTION_LAB_CORPUS_BYTES_PER_HOUR here: ten corpora of 400 KB an address
MAX_CORPUS_BYTES = 8 * MIB  # ATTENTION_LAB_MAX_CORPUS_BYTES here


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("hostile-requests")
    lab = LabProcess(
        folder,
        env={
            "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
            "ATTENTION_LAB_RESERVE_BYTES": "0",
            "ATTENTION_LAB_DATA_DIR": str(folder),  # a store of its own, whose size the flood's test reads
            "ATTENTION_LAB_CORPUS_BYTES_PER_HOUR": str(CORPUS_BYTES_PER_HOUR),
            "ATTENTION_LAB_MAX_CORPUS_BYTES": str(MAX_CORPUS_BYTES),
        },
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


def corpus(name: str, documents: int = 200, chars: int = 2000) -> str:
    """A pasted corpus of its own (each name another corpus): 400 KB as sent by default."""
    return "\n".join(f"{name} {n:04d} " + "w" * (chars - len(name) - 6) for n in range(documents))


def test_one_address_naming_corpora_is_refused_past_its_hours_bytes(lab):
    """Naming a corpus computes nothing, so one device could store a body's worth of spec as often as it can
    send one (300 corpora, 146 MB of the data folder, in seconds). Past its hour's bytes it alone is refused,
    429 naming the setting; a corpus it named already costs nothing again, and another address names its own."""
    with device("127.0.10.1") as flooder:
        answers = [flooder.post(f"{lab.url}/api/search/index", json={"documents": corpus(f"c{n}")}) for n in range(14)]
        statuses = [answer.status_code for answer in answers]
        assert statuses == [200] * 10 + [429] * 4, statuses
        refused = answers[-1]
        assert "ATTENTION_LAB_CORPUS_BYTES_PER_HOUR" in refused.json()["detail"], refused.text
        assert int(refused.headers["Retry-After"]) > 0
        again = flooder.post(f"{lab.url}/api/search/index", json={"documents": corpus("c0")})
        assert again.status_code == 200 and again.json()["index_id"] == answers[0].json()["index_id"]
        atlas = flooder.post(f"{lab.url}/api/atlas", json={"sentences": corpus("atlas", 900, 250)})
        assert atlas.status_code == 429, atlas.text
    with device("127.0.10.2") as learner:
        assert learner.post(f"{lab.url}/api/search/index", json={"documents": corpus("mine")}).status_code == 200
        assert learner.post(f"{lab.url}/api/analyze", json={"text": "still analyzed"}).status_code == 200


def test_corpora_named_from_many_addresses_stay_within_the_stores_bound(lab):
    """Six addresses, each within its hour, name 14 MB of corpora in all against a store that keeps 8 MiB of
    them: the ones named longest ago are let go (404: name the corpus again), the newest are kept, the store's
    file stays near the bound, and a learner's run named before it all is still there."""
    with device("127.0.11.1") as learner:
        run = learner.post(f"{lab.url}/api/analyze", json={"text": "named before the flood"}).json()["run_id"]

    def names(n: int) -> list[str]:
        with device(f"127.0.11.{n + 10}") as client:
            return [
                client.post(f"{lab.url}/api/search/index", json={"documents": corpus(f"a{n}x{k}")}).json()["index_id"]
                for k in range(6)
            ]

    named: list[list[str]] = [[] for _ in range(6)]
    for n in range(6):  # one address after another: which were named first is known
        named[n] = names(n)
    with device("127.0.11.2") as learner:
        first = [learner.get(f"{lab.url}/api/search/index/{index}/progress").status_code for index in named[0]]
        last = [learner.get(f"{lab.url}/api/search/index/{index}/progress").status_code for index in named[-1]]
        assert set(first) == {404} and set(last) == {200}, (first, last)
        assert learner.get(f"{lab.url}/api/runs/{run}/embeddings").status_code == 200
    store = sum(path.stat().st_size for path in lab.log.parent.glob("runs.sqlite3*"))
    assert store < MAX_CORPUS_BYTES + 6 * MIB, store


def flood_index_starts(url: str, n: int, stop) -> None:
    """Address n of four sends its 500 KB corpus again and again, in a process of its own (the learner's
    measurement shares no GIL with it)."""
    body = json.dumps({"documents": corpus(f"flood{n % 4}", 250)}).encode()
    with device(f"127.0.12.{n % 4 + 10}") as client:
        while not stop.is_set():
            sent = client.post(f"{url}/api/search/index", content=body, headers=JSON)
            assert sent.status_code == 200, sent.text


def test_index_starts_flooding_in_leave_health_at_another_address_answered_at_once(lab):
    """Four addresses each send a 500 KB corpus again and again, two at a time, as pages whose learners press
    Index over and over: splitting, checking and hashing each corpus happens off the event loop, and so does
    storing it, so a health check from another address is answered within 0.2 s throughout."""
    stop = multiprocessing.Event()
    floods = [multiprocessing.Process(target=flood_index_starts, args=(lab.url, n, stop)) for n in range(8)]
    for flood in floods:
        flood.start()
    times: list[float] = []
    try:
        with device("127.0.12.1") as learner:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                start = time.monotonic()
                assert learner.get(f"{lab.url}/api/health").status_code == 200
                times.append(time.monotonic() - start)
                time.sleep(0.05)
    finally:
        stop.set()
        for flood in floods:
            flood.join(30)
    assert [flood.exitcode for flood in floods] == [0] * 8
    print(f"health beside the flood: {len(times)} checks, slowest {max(times) * 1000:.0f} ms")
    assert max(times) < 0.2, sorted(times)[-5:]
