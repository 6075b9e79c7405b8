"""The search lesson's pairs under a class's load (issue 55), each device from its own loopback address, against
`python -m app` with MiniLM: pairs at the documented limit on an idle lab, under the default memory budget and a
512 MiB one, are served (or refused at once, naming the bound), and three addresses' pairs of long documents
leave a learner at another address served within 5 s. Work that waits for memory is told 503 after 10 s here
(ATTENTION_LAB_MAX_WAIT_SECONDS), the same answer as after the default 30 s, sooner."""

import asyncio
import threading
import time

import httpx
import pytest

from tests.class_client import device
from tests.conftest import LabProcess, run_async, start_together

pytestmark = pytest.mark.slow

MIB = 1024**2
WAIT_SECONDS = 10
WORDS = "the river bank was steep and the money bank was closed on a sunday in the rain".split()
MAX_PAIRS, MAX_DOCUMENT_CHARS = 20, 2000  # docs/search.md: "Re-read the top k as pairs (at most 20)"


@pytest.fixture(scope="module")
def labs(tmp_path_factory) -> dict[str, LabProcess]:
    quick = {"ATTENTION_LAB_RESERVE_BYTES": "0", "ATTENTION_LAB_MAX_WAIT_SECONDS": str(WAIT_SECONDS)}
    started = {
        "default budget": LabProcess(tmp_path_factory.mktemp("pairs-default"), env=quick),
        "512 MiB": LabProcess(
            tmp_path_factory.mktemp("pairs-512"), env={**quick, "ATTENTION_LAB_MAX_STORE_BYTES": str(512 * MIB)}
        ),
    }
    start_together(*started.values())
    yield started
    for lab in started.values():
        lab.stop()


def patient(address: str, seconds: float) -> httpx.Client:
    """A device that waits up to `seconds` for an answer."""
    client = device(address)
    client.timeout = httpx.Timeout(seconds)
    return client


def long_documents(name: str, count: int) -> str:
    """`count` documents of the longest a document may be, each its own (about 400 tokens of MiniLM)."""
    return "\n".join(
        f"{name} {n}: " + " ".join(WORDS[(n + i) % len(WORDS)] for i in range(400))[: MAX_DOCUMENT_CHARS - 12]
        for n in range(count)
    )


def named_index(lab: LabProcess, client: httpx.Client, name: str, count: int) -> str:
    started = client.post(f"{lab.url}/api/search/index", json={"documents": long_documents(name, count)})
    assert started.status_code == 200, started.text
    return started.json()["index_id"]


def pairs_body(index_id: str, documents: list[int]) -> dict:
    return {"index_id": index_id, "query": "where can I borrow money", "documents": documents, "head": "mean"}


def served_or_refused_at_once(response: httpx.Response, seconds: float) -> None:
    """200, or 422 within a moment naming the bound: never a wait ending in 503."""
    if response.status_code == 422:
        assert seconds < 2 and "ATTENTION_LAB_" in response.json()["detail"], (seconds, response.text)
    else:
        assert response.status_code == 200, (round(seconds, 1), response.text[:300])


@pytest.mark.parametrize("budget", ["default budget", "512 MiB"])
def test_pairs_at_the_documented_limit_are_served_on_an_idle_lab(labs, budget):
    """20 documents of 2,000 characters re-read as pairs with the query: on main, 503 after the wait, the lab
    idle all the while."""
    lab = labs[budget]
    with patient("127.0.13.1", 180) as teacher:
        index_id = named_index(lab, teacher, f"limit {budget}", MAX_PAIRS)
        start = time.monotonic()
        response = teacher.post(f"{lab.url}/api/search/pairs", json=pairs_body(index_id, list(range(MAX_PAIRS))))
        seconds = time.monotonic() - start
    print(f"pairs at the limit, {budget}: {response.status_code} in {seconds:.1f} s")
    served_or_refused_at_once(response, seconds)
    if response.status_code == 200:
        assert len(response.json()["pairs"]) == MAX_PAIRS


def test_three_addresses_pairs_of_long_documents_leave_a_learner_served_within_five_seconds(labs):
    """Three addresses each send two pairs requests of 8 long documents at once (512 MiB budget); a learner at
    another address analyzes a new 512-token text meanwhile, again and again: each answered 200 within 5 s, and
    each pairs request served or refused at once. On main every pairs request got 503 with the lab idle, and
    the learner 503 after the wait."""
    lab = labs["512 MiB"]
    with device("127.0.14.1") as teacher:
        index_id = named_index(lab, teacher, "class", 24)
    answers: list[tuple[httpx.Response, float]] = []

    async def hostile():
        async def one(address: str, documents: list[int]) -> None:
            transport = httpx.AsyncHTTPTransport(local_address=address)
            async with httpx.AsyncClient(transport=transport, timeout=180) as client:
                start = time.monotonic()
                response = await client.post(f"{lab.url}/api/search/pairs", json=pairs_body(index_id, documents))
                answers.append((response, time.monotonic() - start))

        await asyncio.gather(
            *(
                one(f"127.0.14.{10 + n}", list(range(8 * (k % 3), 8 * (k % 3) + 8)))
                for n in range(3)
                for k in (n, n + 1)
            )
        )

    asking = threading.Thread(target=run_async, args=(hostile(),))
    asking.start()
    times = []
    with patient("127.0.14.2", 60) as learner:
        while asking.is_alive() or not times:
            text = f"learner {len(times)} " + " ".join(WORDS[i % len(WORDS)] + str(i) for i in range(300))
            start = time.monotonic()
            response = learner.post(f"{lab.url}/api/analyze", json={"text": text})
            times.append(time.monotonic() - start)
            assert response.status_code == 200 and len(response.json()["tokens"]) == 512, response.text[:300]
            asking.join(0.2)
    print(f"pairs: {[(r.status_code, round(s, 1)) for r, s in answers]}; learner {[round(t, 1) for t in times]}")
    assert len(answers) == 6
    for response, seconds in answers:
        served_or_refused_at_once(response, seconds)
    assert max(times) <= 5, times
