"""The lab runs torch on its torch thread and nowhere else (app.serving.compute): each other thread that
ran a parallel torch operation would add an OpenMP team, and libgomp would then let every team's workers
sleep between the parallel regions of a pass."""

import sys
import threading

import torch
from fastapi.testclient import TestClient

from app.main import create_app
from app.serving import compute


def touches_torch(function) -> bool:
    """A C function of torch's, or a method of a tensor other than `numpy` (which only lends NumPy the
    tensor's memory: the analyze route reads its pooled vector that way, on the event loop)."""
    module = getattr(function, "__module__", None) or ""
    if isinstance(getattr(function, "__self__", None), torch.Tensor):
        return function.__name__ != "numpy"
    return module.startswith("torch")


def every_route(client: TestClient) -> None:
    run = client.post("/api/analyze", json={"text": "the river bank was steep", "text_pair": "we climbed it"})
    other = client.post("/api/analyze", json={"text": "the bank lent money", "ablate": [[0, 1]]}).json()["run_id"]
    base = f"/api/runs/{run.json()['run_id']}"
    answers = [run] + [
        client.get(path)
        for path in (
            f"{base}/attention",
            f"{base}/attention?dtype=float32&layer=1&head=2",
            f"{base}/attention?size=4&measure=norm",
            f"{base}/attention?heads=0,2&blocks=mean&dtype=float16",
            f"{base}/attention?measure=alti_rollout",
            f"{base}/layers/1/heads/3",
            f"{base}/layers/1",
            f"{base}/layers/1/heads/3/queries/1",
            f"{base}/embeddings",
            f"{base}/tokens/1",
            f"{base}/head-stats",
            f"{base}/tokens/1/rollout",
            f"{base}/tokens/1/nearest?k=3",
            f"/api/compare?a={run.json()['run_id']}&b={other}&token_a=1&token_b=1",
        )
    ]
    answers.append(client.post("/api/pooling", json={"text": "a short one", "prefix": "query: "}))
    answers.append(client.post("/api/attribution", json={"text": "a cat sat", "other": "a dog sat"}))
    assert [answer.status_code for answer in answers] == [200] * len(answers), [a.text for a in answers]


def test_every_route_runs_torch_on_the_torch_thread_only(tiny):
    calls_elsewhere = set()

    def watch(frame, event, function):
        thread = threading.current_thread().name
        if event == "c_call" and not thread.startswith("torch") and touches_torch(function):
            calls_elsewhere.add((thread, getattr(function, "__qualname__", repr(function))))

    # Every thread started from now on is watched (the server's event loop, its worker threads), and this one.
    threading.setprofile(watch)
    sys.setprofile(watch)
    try:
        with TestClient(create_app(tiny)) as client:
            every_route(client)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert not calls_elsewhere


def test_torch_threads_share_the_cores():
    cores = torch.get_num_threads()
    try:
        compute.use_threads(2)
        assert compute.computed_now(torch.get_num_threads) == max(1, compute.TORCH_THREADS // 2)
    finally:
        compute.use_threads(1)
    assert compute.computed_now(torch.get_num_threads) == compute.TORCH_THREADS == cores
