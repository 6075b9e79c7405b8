"""Serving beyond one process, as an operator runs it: three uvicorn workers sharing the SQLite store and
then restarted, and two lab processes sharing a real Redis. Every run id answers every sub-resource from
every process, with the same numbers."""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch

from app.web.encoding import decode_attention
from tests.conftest import LAB_PROTOCOL, LabProcess, RedisServer, free_port, start_together
from tests.float32 import pass_tolerance

pytestmark = pytest.mark.slow


def learner(i: int) -> dict:
    """30 short requests that differ in every field of a spec."""
    body = {"text": f"learner {i} reads about the river bank"}
    if i % 3 == 1:
        body["mask"] = "causal"
    if i % 4 == 2:
        body["text_pair"] = "it was steep"
    if i % 5 == 3:
        body["ablate"] = [[1, i % 12]]
    if i % 6 == 5:
        body["pooling"] = "max"
    return body


LEARNERS = [learner(i) for i in range(30)]


def sub_resources(run: str, other: str) -> list[str]:
    base = f"/api/runs/{run}"
    return [
        f"{base}/attention",
        f"{base}/attention?dtype=float32&layer=2&head=3",
        f"{base}/attention?size=4",
        f"{base}/layers/2/heads/3",
        f"{base}/layers/4",
        f"{base}/layers/5/heads/11/queries/1",
        f"{base}/embeddings",
        f"{base}/tokens/1",
        f"{base}/head-stats",
        f"{base}/pooled",
        f"{base}/tokens/1/rollout",
        f"{base}/tokens/1/nearest?k=3",
        f"/api/compare?a={run}&b={other}&token_a=1&token_b=1",
    ]


# Each request on a connection of its own, as from many browsers: the workers share one listening
# socket, so every connection may land on any of them.
FRESH_CONNECTIONS = httpx.Client(timeout=120, limits=httpx.Limits(max_keepalive_connections=0))


def get(url: str) -> httpx.Response:
    return FRESH_CONNECTIONS.get(url)


def analyze(url: str, body: dict) -> httpx.Response:
    return FRESH_CONNECTIONS.post(f"{url}/api/analyze", json=body)


def statuses(url: str, paths: list[str]) -> Counter:
    with ThreadPoolExecutor(6) as pool:
        return Counter(response.status_code for response in pool.map(lambda path: get(url + path), paths))


def attention(url: str, run: str) -> np.ndarray:
    response = get(f"{url}/api/runs/{run}/attention?dtype=float32")
    assert response.status_code == 200, response.text
    return decode_attention(response.content, response.headers)


def runs_held(url: str, processes: int) -> dict[str, int]:
    """Runs in memory per server process, asking /api/health until every process has answered."""
    held = {}
    for _ in range(300):
        health = get(f"{url}/api/health").json()
        held[health["server"]] = health["runs"]
        if len(held) == processes:
            break
    return held


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """`uvicorn app.main:app --http app.serving.server:LabProtocol --workers 3`, its specs in a SQLite file of
    its own."""
    folder = tmp_path_factory.mktemp("workers")
    lab = LabProcess(
        folder,
        command=("-m", "uvicorn", "app.main:app", "--http", LAB_PROTOCOL, "--workers", "3"),
        env={"ATTENTION_LAB_DATA_DIR": str(folder / "data")},
        workers=3,
    )
    lab.start()
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def analyzed(workers) -> list[dict]:
    answers = [analyze(workers.url, body) for body in LEARNERS]
    assert [answer.status_code for answer in answers] == [200] * len(LEARNERS)
    return [answer.json() for answer in answers]


def test_every_run_answers_every_sub_resource_from_every_worker(workers, analyzed):
    ids = [run["run_id"] for run in analyzed]
    assert len(set(ids)) == len(LEARNERS)
    paths = [path for i, run in enumerate(ids) for path in sub_resources(run, ids[i - 1])] * 3
    assert statuses(workers.url, paths) == {200: len(paths)}
    held = runs_held(workers.url, 3)
    # Three workers answered, and between them hold more runs than were analyzed: runs were recomputed
    # by workers that had not computed them.
    assert len(held) == 3 and sum(held.values()) > len(ids), held


def test_the_same_request_gets_the_same_id_from_any_worker(workers, analyzed):
    for body, run in zip(LEARNERS, analyzed, strict=True):
        again = analyze(workers.url, body).json()
        assert again["run_id"] == run["run_id"] and again["tokens"] == run["tokens"]
    explicit = analyze(workers.url, {**LEARNERS[0], "pooling": "mean", "ablate": [], "mask": "bidirectional"})
    assert explicit.json()["run_id"] == analyzed[0]["run_id"]


def test_after_a_restart_every_old_id_answers_with_the_same_numbers(workers, analyzed, minilm):
    before = {run["run_id"]: attention(workers.url, run["run_id"]) for run in analyzed}
    workers.stop()
    workers.start()
    atol = pass_tolerance(minilm.model.config)  # each run in a padded pass, or alone
    for run_id, weights in before.items():
        np.testing.assert_allclose(attention(workers.url, run_id), weights, atol=atol, rtol=0)
    paths = [path for run in before for path in sub_resources(run, next(iter(before)))]
    assert statuses(workers.url, paths) == {200: len(paths)}
    # And the numbers are transformers' own, for a run read alone under the model's mask.
    inputs = minilm.tokenizer(LEARNERS[0]["text"], return_tensors="pt")
    with torch.no_grad():
        reference = minilm.model(**inputs, output_attentions=True).attentions
    served = before[analyzed[0]["run_id"]]
    np.testing.assert_allclose(served, torch.cat(reference).numpy(), atol=atol, rtol=0)


@pytest.fixture(scope="module")
def redis_server_of_replicas():
    server = RedisServer(free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, redis_server_of_replicas):
    """Two `python -m app` processes, as on two machines: nothing shared but the Redis."""
    labs = [
        LabProcess(
            tmp_path_factory.mktemp(f"replica-{name}"), env={"ATTENTION_LAB_STORE": redis_server_of_replicas.url}
        )
        for name in "ab"
    ]
    start_together(*labs)
    yield labs
    for lab in labs:
        lab.stop()


def test_runs_made_on_one_replica_are_served_by_the_other(replicas, minilm):
    a, b = replicas
    made = [analyze(a.url, body).json() for body in LEARNERS[:10]]
    ids = [run["run_id"] for run in made]
    paths = [path for i, run in enumerate(ids) for path in sub_resources(run, ids[i - 1])]
    assert statuses(b.url, paths) == {200: len(paths)}
    for run in ids:
        np.testing.assert_allclose(
            attention(b.url, run), attention(a.url, run), atol=pass_tolerance(minilm.model.config)
        )
    assert [analyze(b.url, body).json()["run_id"] for body in LEARNERS[:10]] == ids


def test_a_store_that_is_down_answers_503_naming_it_and_the_lab_recovers(replicas, redis_server_of_replicas):
    a, b = replicas
    store = redis_server_of_replicas
    made_on_a = analyze(a.url, {"text": "made before the outage"}).json()["run_id"]
    store.stop()
    try:
        refused = analyze(a.url, {"text": "analyzed during the outage"})
        assert refused.status_code == 503
        assert refused.json()["detail"].startswith(f"the run store ({store.url}) is not answering: ")
        assert "refused" in refused.json()["detail"]
        unknown_to_b = get(f"{b.url}/api/runs/{made_on_a}/embeddings")
        assert unknown_to_b.status_code == 503 and store.url in unknown_to_b.json()["detail"]
        health = get(f"{b.url}/api/health")
        assert health.status_code == 200 and health.json()["store"]["answering"] is False
        assert get(f"{a.url}/api/runs/{made_on_a}/layers/0").status_code == 200  # a still holds its run
    finally:
        store.start()  # empty: the test's Redis saves nothing
    after = analyze(a.url, {"text": "analyzed after the outage"})
    assert after.status_code == 200
    assert get(f"{b.url}/api/runs/{after.json()['run_id']}/embeddings").status_code == 200
    assert get(f"{b.url}/api/health").json()["store"] == {"name": store.url, "answering": True, "detail": None}
