"""The engine's run cache, on the tiny random BERT."""

import threading

import pytest

import app.lab
from app.gate import PassGate
from app.lab import Lab


@pytest.fixture
def counted(monkeypatch, tiny):
    calls = []
    real_capture = app.lab.capture

    def counting_capture(*args, **kwargs):
        calls.append(args)
        return real_capture(*args, **kwargs)

    monkeypatch.setattr(app.lab, "capture", counting_capture)
    return Lab(tiny, max_chars=1000, max_runs=3, max_store_bytes=10**9, gate=PassGate(2, 4, 5)), calls


def test_a_repeated_prompt_is_answered_without_a_second_forward_pass(counted):
    lab, calls = counted
    first = lab.analyze("the same prompt")
    assert lab.analyze("the same prompt") is first
    assert len(calls) == 1
    assert lab.analyze("the same prompt", mask="causal") is not first
    assert lab.analyze("the same prompt", pooling="max") is not first
    assert len(calls) == 3


def test_an_evicted_prompt_runs_again(counted):
    lab, calls = counted
    first = lab.analyze("kept for a while")
    for i in range(3):
        lab.analyze(f"pushes it out {i}")
    again = lab.analyze("kept for a while")
    assert again.run_id != first.run_id and len(calls) == 5
    assert lab.run(again.run_id) is again


def test_identical_concurrent_requests_share_one_pass(counted):
    lab, calls = counted
    results = []
    threads = [threading.Thread(target=lambda: results.append(lab.analyze("everyone types this"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len({run.run_id for run in results}) == 1


def test_passes_on_two_threads_at_once_record_only_their_own(tiny):
    """Hooks see every thread's pass; each recording must keep only its own thread's numbers."""
    lab = Lab(tiny, max_chars=1000, max_runs=8, max_store_bytes=10**9, gate=PassGate(2, 4, 5))
    texts = ["one short text", "a rather different and longer sentence for the other thread"]
    expected = {text: Lab(tiny, 1000, 8, 10**9, PassGate(1, 1, 5)).analyze(text).attention() for text in texts}
    barrier = threading.Barrier(2)
    results = {}

    def run(text):
        barrier.wait()
        for _ in range(5):
            results[text] = lab.analyze(text + " " * _).attention()

    threads = [threading.Thread(target=run, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for text in texts:
        for got, want in zip(results[text], expected[text], strict=True):
            assert got.shape == want.shape
            assert (got - want).abs().max() < 1e-5
