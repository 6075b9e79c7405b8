"""The engine's run cache, its sharing of passes and its recomputation from the spec store, on the tiny
random BERT."""

import asyncio
import dataclasses
import threading

import pytest
import torch

import app.engine.engine
from app.serving.lab import ForeignRun, RunNotFound
from tests.conftest import make_lab, run_async
from tests.float32 import largest, pass_tolerance


def same_numbers(a, b, config) -> bool:
    """The same spec's weights, computed again: alone, or in a padded pass."""
    atol = pass_tolerance(config)
    return all((x - y).abs().max() <= atol for x, y in zip(a.attention(), b.attention(), strict=True))


@pytest.fixture
def counted(monkeypatch, tiny, tmp_path):
    lab = make_lab(tiny, tmp_path, max_runs=3, passes=2)  # its start reads the model once: not counted
    calls = []
    real_capture = app.engine.engine.capture_batch

    def counting_capture(*args, **kwargs):
        calls.append(args)
        return real_capture(*args, **kwargs)

    monkeypatch.setattr(app.engine.engine, "capture_batch", counting_capture)
    return lab, calls


def test_a_repeated_prompt_is_answered_without_a_second_forward_pass(counted):
    lab, calls = counted
    first = lab.run_sync(lab.spec("the same prompt"))
    assert lab.run_sync(lab.spec("the same prompt")) is first
    assert len(calls) == 1
    assert lab.run_sync(lab.spec("the same prompt", mask="causal")) is not first
    assert lab.run_sync(lab.spec("the same prompt", pooling="max")) is not first
    assert len(calls) == 3


def test_an_evicted_run_is_recomputed_from_its_stored_spec(counted):
    lab, calls = counted
    first = run_async(lab.serve_spec(lab.spec("kept for a while")))
    for i in range(3):
        run_async(lab.serve_spec(lab.spec(f"pushes it out {i}")))
    assert lab.kept(first.spec) is None and len(calls) == 4
    again = run_async(lab.serve_run(first.run_id))
    assert again is not first and again.spec == first.spec and len(calls) == 5
    assert same_numbers(again, first, lab.loaded.model.config)
    assert run_async(lab.serve_run(first.run_id)) is again


def test_identical_concurrent_requests_share_one_pass(counted):
    lab, calls = counted

    async def a_class_types_the_same_prompt():
        return await asyncio.gather(*(lab.serve_spec(lab.spec("everyone types this")) for _ in range(8)))

    runs = run_async(a_class_types_the_same_prompt())
    assert len(calls) == 1 and all(run is runs[0] for run in runs)


def test_concurrent_requests_for_an_evicted_run_share_one_recomputation(counted):
    lab, calls = counted
    first = run_async(lab.serve_spec(lab.spec("asked for by many")))
    for i in range(3):
        run_async(lab.serve_spec(lab.spec(f"pushes it out {i}")))

    async def many_ask_by_id():
        return await asyncio.gather(*(lab.serve_run(first.run_id) for _ in range(6)))

    runs = run_async(many_ask_by_id())
    assert (
        len(calls) == 5
        and all(run is runs[0] for run in runs)
        and same_numbers(runs[0], first, lab.loaded.model.config)
    )


@pytest.mark.parametrize("run_id", ["a" * 26, "A" * 26, "../etc/passwd", "", "a" * 5000])
def test_an_id_the_store_does_not_hold_is_not_found(counted, run_id):
    lab, calls = counted
    with pytest.raises(RunNotFound, match="analyze the text again"):
        run_async(lab.serve_run(run_id))
    assert calls == []


def test_a_second_lab_on_the_same_store_serves_the_first_ones_runs(tiny, tmp_path):
    """Two labs on one SQLite file: two workers of one server, or one server before and after a restart."""
    first, second = make_lab(tiny, tmp_path), make_lab(tiny, tmp_path)
    run = run_async(first.serve_spec(first.spec("shared between workers", text_pair="and kept", ablate=[(1, 2)])))
    served = run_async(second.serve_run(run.run_id))
    assert served.spec == run.spec and [t.text for t in served.tokens] == [t.text for t in run.tokens]
    assert same_numbers(served, run, tiny.model.config)


def test_a_run_of_another_model_is_not_recomputed_with_this_one(tiny, minilm, tmp_path):
    made_by_tiny = make_lab(tiny, tmp_path)
    run = run_async(made_by_tiny.serve_spec(made_by_tiny.spec("a tiny model's run")))
    with pytest.raises(ForeignRun) as refused:
        run_async(make_lab(minilm, tmp_path).serve_run(run.run_id))
    message = str(refused.value)
    assert "tiny-bert" in message and "sentence-transformers/all-MiniLM-L6-v2" in message
    assert tiny.digest[:12] in message and "analyze the text again" in message


def test_passes_on_two_threads_at_once_record_only_their_own(tiny, tmp_path):
    """Hooks see every thread's pass; each recording must keep only its own thread's numbers."""
    lab = make_lab(tiny, tmp_path / "both")
    texts = ["one short text", "a rather different and longer sentence for the other thread"]
    alone = make_lab(tiny, tmp_path / "alone")
    expected = {text: alone.run_sync(alone.spec(text)).attention() for text in texts}
    barrier = threading.Barrier(2)
    results = {}

    def run(text):
        barrier.wait()
        for _ in range(5):
            results[text] = lab.run_sync(lab.spec(text + " " * _)).attention()

    threads = [threading.Thread(target=run, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for text in texts:
        for got, want in zip(results[text], expected[text], strict=True):
            assert got.shape == want.shape
            assert (got - want).abs().max() <= pass_tolerance(tiny.model.config)


def test_a_long_inputs_pooling_pass_waits_until_its_vector_is_asked_for(tiny, tmp_path, monkeypatch):
    """Past max_seq_length the sentence vector takes a pass of its own over the cut input: analyze leaves
    it for later, the requests that ask for the vector at once share one, and the cache counts its bytes."""
    lab = make_lab(dataclasses.replace(tiny, pooled_length=8), tmp_path)
    passes = []
    real = app.engine.engine.final_states
    monkeypatch.setattr(app.engine.engine, "final_states", lambda *args: passes.append(args) or real(*args))
    text = "a text longer than the eight tokens its pooling reads"
    run = run_async(lab.serve_spec(lab.spec(text)))
    assert len(run.tokens) > 8 and run.pooling_pass_due and passes == []
    held = lab.runs.nbytes

    async def three_ask_at_once():
        return await asyncio.gather(*(lab.pooled(run) for _ in range(3)))

    pooled = run_async(three_ask_at_once())
    assert len(passes) == 1 and pooled[0] is pooled[1] is pooled[2] and lab.kept(run.spec) is pooled[0]
    assert run_async(lab.pooled(pooled[0])) is pooled[0] and len(passes) == 1
    hidden = tiny.model.config.hidden_size
    assert pooled[0].pooled_tokens == 8 and lab.runs.nbytes == held + 8 * hidden * 4
    # transformers' own last hidden states of the input cut at 8 tokens, mean-pooled
    cut = tiny.tokenizer(text, truncation=True, max_length=8, return_tensors="pt")
    with torch.inference_mode():
        expected = tiny.model.base_model(**cut).last_hidden_state[0].mean(0)
    assert run.spec.pooling == "mean"
    atol = pass_tolerance(tiny.model.config, largest(expected))
    torch.testing.assert_close(pooled[0].pooled, expected, atol=atol, rtol=0)
