"""A long run's attention, read a window at a time: exact cells of any window, and overviews pooled to a
screen's resolution, each computed a chunk of query rows at a time. Checked against transformers' own eager
output_attentions for a 4-block, 8-head Llama-style decoder whose blocks are past the size the lab makes whole
(cells.ROWS_FROM_BYTES), and against NumPy's pooling of those exact matrices; and on the packaged MiniLM,
whose blocks the lab keeps whole, through the same API."""

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine import cells
from app.engine.engine import Engine
from app.engine.model import load_model
from app.engine.runs import ROW_CHUNK
from app.main import create_app
from app.settings import get_settings
from app.web.encoding import decode_attention
from tests.families import long_llama
from tests.float32 import pass_tolerance, tolerance

TEXT = " ".join(["the cat sat on the mat", "a quick brown fox jumps over the lazy dog"] * 80)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long-llama")
    long_llama(folder, positions=4096)
    return load_model(folder)


@pytest.fixture(scope="module")
def reference(llama):
    """The run's tokens and transformers' eager attention weights and values for them, [layer][head, q, k]."""
    engine = Engine(llama, max_chars=100_000)
    tokens, _ = engine.tokenize(TEXT)
    ids = torch.tensor([[token.id for token in tokens]])
    with torch.inference_mode():
        out = llama.model(input_ids=ids, output_attentions=True)
    return [weights[0].numpy() for weights in out.attentions]


@pytest.fixture(scope="module")
def client(llama, monkeypatch_module):
    monkeypatch_module.setenv("ATTENTION_LAB_MAX_TOKENS", "4096")
    get_settings.cache_clear()
    with TestClient(create_app(llama)) as test_client:
        yield test_client
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def run_id(client):
    answer = client.post("/api/analyze", json={"text": TEXT})
    assert answer.status_code == 200, answer.text
    return answer.json()["run_id"]


def attention(client, run_id: str, **params) -> tuple[np.ndarray, dict]:
    answer = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32", **params})
    assert answer.status_code == 200, answer.text
    return decode_attention(answer.content, answer.headers), answer.headers


def max_pooled(matrix: np.ndarray, size: int) -> np.ndarray:
    """Adaptive max pooling in NumPy: bin i of S over L cells is [⌊i·L/S⌋, ⌈(i+1)·L/S⌉)."""
    edges = lambda length, count: [(i * length // count, -(-(i + 1) * length // count)) for i in range(count)]  # noqa: E731
    rows, cols = (edges(length, min(size, length)) for length in matrix.shape)
    return np.array([[matrix[a:b, c:d].max() for c, d in cols] for a, b in rows], dtype=matrix.dtype)


def test_the_run_is_read_row_by_row(llama, reference):
    n = reference[0].shape[-1]
    assert 8 * n * n * 4 > cells.ROWS_FROM_BYTES and n % ROW_CHUNK  # a chunk of fewer rows at the end too


def test_rows_of_a_long_run_are_the_models_weights(llama, reference):
    """Any rows of any head, computed alone, equal transformers' eager weights to float rounding: rows alone
    and the whole block are products of other shapes, and the pass was fused (tests/float32.py: the errors of
    the blocks up to the one read)."""
    engine = Engine(llama, max_chars=100_000)
    run = engine.compute(engine.spec(TEXT))
    for layer, expected in enumerate(reference):
        atol = pass_tolerance(llama.model.config, blocks=layer + 1)
        for heads, rows in (([0], range(0, 3)), ([5], range(100, 170)), ([2, 3, 7], range(1500, len(run.tokens)))):
            got = run.weight_rows(layer, heads, rows).numpy()
            np.testing.assert_allclose(got, expected[heads, rows.start : rows.stop], atol=atol, rtol=0)
    # A query's row in the worked example is the same row.
    row = run.query(0, 4, 777)
    np.testing.assert_allclose(row["weights"].numpy(), reference[0][4, 777], atol=block_0(llama), rtol=0)


def block_0(llama) -> float:
    """How far block 0's cells computed a window at a time may be from the whole block's: one block's sums in
    other orders (tests/float32.py)."""
    return pass_tolerance(llama.model.config, blocks=1)


def test_slices_and_their_pieces_put_together_the_same_cells(llama, reference, monkeypatch):
    """A window computed in many slices, each in many pieces of rows pooled at once (here 64 rows a piece and
    two pieces a slice), is the exact matrix max-pooled: pooled bins of uneven and of even widths, and exact
    rows, each piece's boundary wherever the bins put it."""
    monkeypatch.setattr(cells, "PIECE_CELLS", 1)  # the fewest rows a piece: one ROW_CHUNK
    engine = Engine(llama, max_chars=100_000)
    run = engine.compute(engine.spec(TEXT))
    n = len(run.tokens)
    monkeypatch.setattr(cells, "ROWS_WORK", 2 * ROW_CHUNK * n)
    source = cells.row_source(run, llama.model, "weights")
    plan = cells.Plan("weights", (0,), (1,))
    for window, want in (
        (cells.Window(range(n), range(n), 300), max_pooled(reference[0][1], 300)),
        (cells.Window(range(200, 1400), range(100, 1300), 300), max_pooled(reference[0][1, 200:1400, 100:1300], 300)),
        (cells.Window(range(130, 400), range(0, n)), reference[0][1, 130:400]),
    ):
        slices = cells.window_slices(source, plan, window, n)
        assert len(slices) > 1
        *_, got = (compute() for compute in slices)
        np.testing.assert_allclose(got[0, 0].numpy(), want, atol=block_0(llama), rtol=0)


def test_a_zoomed_window_holds_the_exact_cells(client, run_id, reference, llama):
    got, headers = attention(client, run_id, layer=0, head=3, rows="640:704", cols="600:664")
    assert got.shape == (1, 1, 64, 64) and "X-Attention-Pooling" not in headers
    assert headers["X-Attention-Window"] == "640,704,600,664"
    np.testing.assert_allclose(got[0, 0], reference[0][3, 640:704, 600:664], atol=block_0(llama), rtol=0)
    got, _ = attention(client, run_id, layer=2, head=6, rows="1001:1010", cols="0:1600")
    np.testing.assert_allclose(got[0, 0], reference[2][6, 1001:1010, :1600], atol=pass_tolerance(llama.model.config))


def test_the_overview_is_the_exact_matrix_max_pooled(client, run_id, reference, llama):
    got, headers = attention(client, run_id, layer=0, head=1, size=512)
    n = reference[0].shape[-1]
    assert headers["X-Attention-Pooling"] == "max" and headers["X-Attention-Window"] == f"0,{n},0,{n}"
    np.testing.assert_allclose(got[0, 0], max_pooled(reference[0][1], 512), atol=block_0(llama), rtol=0)
    # A window of the overview, pooled to its own bins; every head of a block; uint8 as the small pictures.
    got, _ = attention(client, run_id, layer=0, head=1, rows="200:1400", cols="100:1300", size=300)
    want = max_pooled(reference[0][1, 200:1400, 100:1300], 300)
    np.testing.assert_allclose(got[0, 0], want, atol=block_0(llama), rtol=0)
    got, _ = attention(client, run_id, layer=3, size=64)
    want = np.stack([max_pooled(head, 64) for head in reference[3]])
    np.testing.assert_allclose(got[0], want, atol=pass_tolerance(llama.model.config), rtol=0)


def test_means_of_heads_and_blocks_are_pooled_after_averaging(client, run_id, reference):
    got, _ = attention(client, run_id, layer=0, heads="1,2,5", size=256)
    mean = reference[0][[1, 2, 5]].astype(np.float64).mean(0).astype(np.float32)
    np.testing.assert_allclose(got[0, 0], max_pooled(mean, 256), atol=tolerance(3), rtol=0)
    got, _ = attention(client, run_id, blocks="mean", rows="0:64", cols="0:64")
    mean = np.mean([layer.astype(np.float64).mean(0) for layer in reference], 0)
    np.testing.assert_allclose(got[0, 0], mean[:64, :64], atol=tolerance(sum(len(layer) for layer in reference)))


def test_norm_weighted_rows_are_the_weights_times_each_keys_length(client, run_id, reference, llama):
    """‖α·f(x)‖ = α_ij ‖v_j W_O^h‖: the lengths from the model's own value vectors, in NumPy."""
    n = reference[0].shape[-1]
    head = client.get(f"/api/runs/{run_id}/layers/0/heads/2/queries/0").json()
    v = np.array(head["v"], dtype=np.float64)  # [key, d_head]
    w_o = llama.model.model.layers[0].self_attn.o_proj.weight.detach().numpy().astype(np.float64)
    lengths = np.linalg.norm(v @ w_o[:, 2 * 32 : 3 * 32].T, axis=-1)
    got, headers = attention(client, run_id, layer=0, head=2, measure="norm", rows="64:128", cols=f"0:{n}")
    assert headers["X-Attention-Measure"] == "norm"
    # each length a norm of sums of 32 terms: relative to itself
    rtol = tolerance(32 + w_o.shape[0])
    np.testing.assert_allclose(got[0, 0], reference[0][2, 64:128] * lengths, rtol=rtol, atol=1e-7)


def test_whole_blocks_past_their_bound_and_windows_too_large_are_refused(client, run_id):
    answer = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32", "rows": "10:5"})
    assert answer.status_code == 422 and "not a window of this run" in answer.json()["detail"]
    answer = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32", "layer": 0})
    assert answer.status_code == 422 and "one answer holds" in answer.json()["detail"]
    answer = client.get(f"/api/runs/{run_id}/attention", params={"layer": 0, "head": 9, "size": 64})
    assert answer.status_code == 404 and "heads are 0 to 7" in answer.json()["detail"]


def test_the_analyze_answer_holds_the_first_overview(client):
    answer = client.post(
        "/api/analyze", json={"text": TEXT, "attention": {"dtype": "float32", "layer": 0, "head": 0, "size": 512}}
    ).json()
    attention = answer["attention"]
    n = len(answer["tokens"])
    assert attention["shape"] == [1, 1, 512, 512] and attention["pooling"] == "max"
    assert attention["window"] == [0, n, 0, n]


def test_minilm_windows_and_overviews_are_cut_from_its_whole_blocks(minilm, tmp_path):
    """A short run's blocks are whole and kept: its windows are their cells, its overview their max pool."""
    with TestClient(create_app(minilm)) as client:
        text = "The river bank was steep, and the tired animal rested on the bank of the river. " * 4
        run_id = client.post("/api/analyze", json={"text": text}).json()["run_id"]
        ids = torch.tensor([[t["id"] for t in client.post("/api/analyze", json={"text": text}).json()["tokens"]]])
        with torch.inference_mode():
            reference = minilm.model(input_ids=ids, output_attentions=True).attentions[4][0].numpy()
        got, headers = attention(client, run_id, layer=4, head=7, rows="3:40", cols="10:20")
        assert np.array_equal(got[0, 0], reference[7, 3:40, 10:20])  # bit for bit: same shapes (lone passes)
        got, headers = attention(client, run_id, layer=4, head=7, size=16)
        assert headers["X-Attention-Pooling"] == "max"
        assert np.array_equal(got[0, 0], max_pooled(reference[7], 16))  # bit for bit: same shapes, then a max
