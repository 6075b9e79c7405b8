"""Issue #19, "Every number the page draws equals the server's": the front end's arithmetic against NumPy.

static/js/matrix.js runs in chromium on the float32 attention the API serves; NumPy recomputes every view
from the same bytes in float64, independently: the mean over a head set, the mean over blocks, the sink
columns hidden (and the rest renormalised by their own sum), the segment filters. Then the page itself: the
heatmap, the attends view, the difference view, predict-first and the exports show those same numbers.

The three defects of the issue have regression tests here: renormalising by 1 − sink (a near-empty row, a
causal first query and a synthetic row), a difference that ignored the head set and the block mean, and
predict-first judging a block-averaged question on one block's row.
"""

import itertools
import json
import time
from urllib.parse import parse_qs, quote, urlparse

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import check_local, wait_until, watched
from tests.browser.test_page import DEFAULT_TEXT, open_lab, run_id, wait_view

pytestmark = pytest.mark.slow

MODEL = {"layers": 6, "heads": 12}
ALL_HEADS = list(range(12))
HEAD_SET = [1, 4, 9]
PAIR = ("The animal didn't cross the street", "because it was too tired")
SINK_MODES = ["show", "hide", "renormalise"]
SEGMENTS = ["all", "AA", "AB", "BA", "BB"]
ATOL = 1e-6


@pytest.fixture(scope="module")
def context(browser):
    """One 1280×720 browser context for the module: its pages share one HTTP cache, so the lab's immutable
    scripts (plotly.js and the ES modules) are fetched and compiled once a module rather than once a test."""
    context = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    yield context
    context.close()


@pytest.fixture
def page(context):
    """A fresh page for each test, as tests/browser/conftest.py's `page` is, in the module's context; fails the
    test if any request leaves 127.0.0.1 or the page raises."""
    page = watched(context.new_page())
    yield page
    page.close()
    check_local(page)


@pytest.fixture(scope="module")
def module_page(context, server):
    """One page of the lab for the module's tests of the pure ES modules (matrix.js on arrays they pass in): what
    they compute does not depend on a fresh load, so the page is loaded once. Its errors and requests are kept,
    for the `modules` fixture to check after each test."""
    page = watched(context.new_page())
    page.goto(f"{server}/")
    yield page
    page.close()


@pytest.fixture
def modules(module_page):
    """The module's one lab page; fails the test if, while it ran, a request left 127.0.0.1 or the page raised."""
    requests, errors = len(module_page.requests), len(module_page.errors)
    yield module_page
    check_local(module_page, requests, errors)


# --- the server's numbers --------------------------------------------------------------------------------------


def analyze(api, text=DEFAULT_TEXT, pair=None, mask="bidirectional") -> dict:
    response = api.post("/api/analyze", json={"text": text, "text_pair": pair, "mask": mask})
    response.raise_for_status()
    return response.json()


def attention(api, run: str) -> np.ndarray:
    """[layer, head, query, key], exactly the float32 weights the model computed."""
    response = api.get(f"/api/runs/{run}/attention", params={"dtype": "float32"})
    response.raise_for_status()
    assert response.headers["X-Attention-Dtype"] == "float32"
    shape = tuple(int(n) for n in response.headers["X-Attention-Shape"].split(","))
    return np.frombuffer(response.content, dtype="<f4").reshape(shape)


# --- the views, recomputed in NumPy (float64) --------------------------------------------------------------------


def view(layer=0, head=0, heads=ALL_HEADS, block_mean=False, sinks="show", segments="all") -> dict:
    return {
        "layer": layer,
        "head": head,
        "heads": list(heads),
        "blockMean": block_mean,
        "sinks": sinks,
        "segments": segments,
    }


def sink_columns(tokens) -> np.ndarray:
    """The tokens the tokenizer added around the text: special, and no characters of their own."""
    return np.array([token["special"] and token["start"] == token["end"] for token in tokens])


def head_block_mean(weights: np.ndarray, v: dict) -> np.ndarray:
    layers = list(range(weights.shape[0])) if v["blockMean"] else [v["layer"]]
    heads = v["heads"] if v["head"] == "mean" else [v["head"]]
    return weights[np.ix_(layers, heads)].astype(np.float64).mean(axis=(0, 1))  # [query, key]


def expected_view(weights: np.ndarray, tokens, v: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """(matrix with NaN where the view leaves a cell out, sink per row or None: the hidden columns' sum, or
    renormalised, like the cells a share: their share of the row's total)."""
    matrix = head_block_mean(weights, v)
    sink = None
    if v["sinks"] != "show":
        hidden = sink_columns(tokens)
        sink = matrix[:, hidden].sum(axis=1)
        kept = matrix[:, ~hidden].sum(axis=1)
        if v["sinks"] == "renormalise":
            matrix = matrix / np.where(kept > 0, kept, 1)[:, None]
            sink = sink / (sink + kept)
        matrix = np.where(hidden[None, :], np.nan, matrix)
    if v["segments"] != "all":
        segment = np.array([token["segment"] for token in tokens])
        keep = (segment[:, None] == v["segments"][0]) & (segment[None, :] == v["segments"][1])
        matrix = np.where(keep, matrix, np.nan)
    return matrix, sink


def assert_same(actual, expected, message=""):
    """Equal to 1e-6, and NaN exactly where NaN."""
    actual = np.array(actual, dtype=np.float64)  # None (a NaN sent through JSON) becomes NaN
    assert actual.size == expected.size, message
    actual = actual.reshape(expected.shape)  # a flat [query × key] from the page
    # bit for bit: no rounding (where the blanks are)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=f"blank cells differ: {message}")
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0, err_msg=message)


# --- the ES modules, in chromium ----------------------------------------------------------------------------------

# matrix.js and colors.js are pure modules, imported on the lab's page (script-src 'self' allows it), whose
# config declares the measures that matrix.js names views by (measures.js).
PRELUDE = """
  const m = await import('/static/js/matrix.js');
  const plain = (values) => (values === null ? null : Array.from(values, (v) => (Number.isNaN(v) ? null : v)));
  const load = async (run) => {
    const response = await fetch(`/api/runs/${run}/attention?dtype=float32`);
    const [layers, heads, queries, keys] = response.headers.get('X-Attention-Shape').split(',').map(Number);
    const all = new Float32Array(await response.arrayBuffer());
    const size = heads * queries * keys;
    return Array.from({ length: layers }, (_, layer) => all.subarray(layer * size, (layer + 1) * size));
  };
  const shown = (blocks, tokens, view) => {
    const { matrix, sink } = m.viewMatrix(blocks, tokens, view);
    return { matrix: plain(matrix), sink: plain(sink) };
  };
"""


def in_chromium(page, server, body: str, args):
    if not page.url.startswith(server):
        page.goto(f"{server}/")
    return page.evaluate(f"async (args) => {{ {PRELUDE} {body} }}", args)


def every_view(n_layers: int, pair: bool):
    heads = [
        {"head": 2, "heads": HEAD_SET},  # one head: the head set must be ignored
        {"head": 11, "heads": ALL_HEADS},
        {"head": "mean", "heads": ALL_HEADS},
        {"head": "mean", "heads": HEAD_SET},
    ]
    blocks = [{"layer": layer, "block_mean": False} for layer in range(n_layers)] + [{"layer": 2, "block_mean": True}]
    segments = SEGMENTS if pair else ["all", "AB"]  # one segment: AB leaves everything out
    for head, block, sinks, segment in itertools.product(heads, blocks, SINK_MODES, segments):
        yield view(**head, **block, sinks=sinks, segments=segment)


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
@pytest.mark.parametrize("pair", [False, True], ids=["sentence", "pair"])
def test_every_view_of_a_run_equals_numpy(modules, server, api, mask, pair):
    run = analyze(api, *(PAIR if pair else (DEFAULT_TEXT,)), mask=mask)
    weights = attention(api, run["run_id"])
    tokens = run["tokens"]
    if pair:
        assert {token["segment"] for token in tokens} == {"A", "B"}
    views = list(every_view(weights.shape[0], pair))
    got = in_chromium(
        modules,
        server,
        "const blocks = await load(args.run); return args.views.map((view) => shown(blocks, args.tokens, view));",
        {"run": run["run_id"], "tokens": tokens, "views": views},
    )
    assert len(got) == len(views)
    for v, result in zip(views, got, strict=True):
        matrix, sink = expected_view(weights, tokens, v)
        assert_same(result["matrix"], matrix, json.dumps(v))
        if sink is None:
            assert result["sink"] is None, v
        else:
            assert_same(result["sink"], sink, f"sink of {json.dumps(v)}")
        if v["sinks"] == "renormalise" and v["segments"] == "all":  # every row keeps exactly 1 (or nothing)
            kept = np.nansum(np.array(result["matrix"], dtype=np.float64).reshape(matrix.shape), axis=1)
            assert np.all((np.abs(kept - 1) < 1e-5) | (kept == 0)), v


def test_a_row_that_keeps_almost_nothing_renormalises_to_its_own_sum(modules, server):
    """The issue's synthetic row: 0.99998 on [CLS]/[SEP], 1e-5 on each of a and b. Dividing by 1 − sink in
    float32 gave a = 0.50081; the kept cells divided by their own sum give 0.5 and 0.5."""
    tokens = [
        {"index": 0, "text": "[CLS]", "special": True, "added": True, "start": 0, "end": 0, "segment": "A"},
        {"index": 1, "text": "a", "special": False, "added": False, "start": 0, "end": 1, "segment": "A"},
        {"index": 2, "text": "b", "special": False, "added": False, "start": 2, "end": 3, "segment": "A"},
        {"index": 3, "text": "[SEP]", "special": True, "added": True, "start": 3, "end": 3, "segment": "A"},
    ]
    row = [0.6, 1e-5, 1e-5, 0.39998]
    matrix = [[0.25] * 4, row, [0.1, 0.2, 0.3, 0.4], row]  # one block, one head, [query, key]
    got = in_chromium(
        modules,
        server,
        """const blocks = [Float32Array.from(args.matrix.flat())];
           const view = { layer: 0, head: 0, heads: [0], blockMean: false, segments: 'all' };
           return ['hide', 'renormalise'].map((sinks) => shown(blocks, args.tokens, { ...view, sinks }));""",
        {"tokens": tokens, "matrix": matrix},
    )
    hidden, renormalised = (np.array(g["matrix"], dtype=np.float64).reshape(4, 4) for g in got)
    assert renormalised[1, 1] == pytest.approx(0.5, abs=ATOL) and renormalised[1, 2] == pytest.approx(0.5, abs=ATOL)
    assert renormalised[3, 1] == pytest.approx(0.5, abs=ATOL)
    assert np.isnan(renormalised[:, [0, 3]]).all() and np.isnan(hidden[:, [0, 3]]).all()
    np.testing.assert_allclose(renormalised[2, 1:3], [0.4, 0.6], atol=ATOL)
    np.testing.assert_allclose(hidden[1, 1:3], np.float32(1e-5), rtol=1e-6)  # "hide" leaves the weights as given
    np.testing.assert_allclose(got[1]["sink"], [0.5, 0.99998, 0.5, 0.99998], atol=ATOL)


def test_the_near_empty_row_of_block_0_head_2(modules, server, api):
    """Block 0, head 2, query "the" keeps about 5e-6 outside [CLS]/[SEP]: its renormalised weight on itself is
    the kept weights' own ratio, not the old heatmap's division by the float32 1 − sink (0.9512)."""
    run = analyze(api)
    weights = attention(api, run["run_id"])
    tokens = run["tokens"]
    assert tokens[1]["text"] == "the"
    row = weights[0, 2, 1].astype(np.float64)
    kept = row[1:-1]
    assert kept.sum() < 1e-5  # the near-empty row the issue names
    expected = kept[0] / kept.sum()
    old = kept[0] / (np.float32(1) - (weights[0, 2, 1, 0] + weights[0, 2, 1, -1]))  # the old, wrong number
    assert abs(expected - old) > 1e-3  # so this test tells the two apart
    got = in_chromium(
        modules,
        server,
        "const blocks = await load(args.run); return shown(blocks, args.tokens, args.view);",
        {"run": run["run_id"], "tokens": tokens, "view": view(0, 2, sinks="renormalise")},
    )
    n = len(tokens)
    shown_row = np.array(got["matrix"], dtype=np.float64).reshape(n, n)[1]
    assert shown_row[1] == pytest.approx(expected, abs=ATOL)
    assert np.nansum(shown_row) == pytest.approx(1, abs=ATOL)
    assert got["sink"][1] == pytest.approx(row[[0, -1]].sum(), abs=ATOL)


def test_a_causal_first_query_keeps_all_of_its_weight_on_itself(modules, server, api):
    """Under the causal mask query 1 sees [CLS] and itself: hiding [CLS] and renormalising leaves exactly 1 on
    itself in every block and head, in every head mean and in the mean over blocks (the old heatmap: 0.9988)."""
    run = analyze(api, mask="causal")
    views = [view(layer, head, sinks="renormalise") for layer in range(6) for head in range(12)]
    views += [view(layer, "mean", heads, sinks="renormalise") for layer in range(6) for heads in (ALL_HEADS, HEAD_SET)]
    views += [view(0, 5, block_mean=True, sinks="renormalise"), view(0, "mean", HEAD_SET, True, "renormalise")]
    got = in_chromium(
        modules,
        server,
        """const blocks = await load(args.run), n = args.tokens.length;
           return args.views.map((view) => m.viewMatrix(blocks, args.tokens, view).matrix[1 * n + 1]);""",
        {"run": run["run_id"], "tokens": run["tokens"], "views": views},
    )
    np.testing.assert_allclose(got, 1, atol=ATOL)


def test_a_difference_with_a_head_set_and_a_block_mean(modules, server, api):
    """A − B of two runs, each view computed by viewMatrix with the chosen heads (and blocks): the old
    difference view took every head of one block whatever was chosen."""
    a, b = analyze(api), analyze(api, mask="causal")
    wa, wb = attention(api, a["run_id"]), attention(api, b["run_id"])
    views = [
        view(2, "mean", HEAD_SET),
        view(2, "mean", HEAD_SET, True),
        view(2, 7),
        view(2, "mean", HEAD_SET, True, "hide"),
    ]
    got = in_chromium(
        modules,
        server,
        """const [a, b] = [await load(args.a), await load(args.b)];
           return args.views.map((view) => {
             const [x, y] = [m.viewMatrix(a, args.tokens, view).matrix, m.viewMatrix(b, args.tokens, view).matrix];
             return plain(x.map((value, cell) => value - y[cell]));
           });""",
        {"a": a["run_id"], "b": b["run_id"], "tokens": a["tokens"], "views": views},
    )
    for v, difference in zip(views, got, strict=True):
        expected = expected_view(wa, a["tokens"], v)[0] - expected_view(wb, b["tokens"], v)[0]
        assert_same(difference, expected, json.dumps(v))
    every_head = wa[2].mean(0) - wb[2].mean(0)  # what the old view showed for any head set
    one_block = head_block_mean(wa, views[0]) - head_block_mean(wb, views[0])
    assert np.abs(np.array(got[0], dtype=float).reshape(every_head.shape) - every_head).max() > 0.01
    assert np.abs(np.array(got[1], dtype=float).reshape(one_block.shape) - one_block).max() > 0.01


def test_predict_first_judges_a_block_mean_on_the_block_mean(modules, server, api):
    run = analyze(api)
    weights = attention(api, run["run_id"])
    v = view(0, 5, block_mean=True)
    got = in_chromium(
        modules,
        server,
        """const blocks = await load(args.run), n = args.tokens.length;
           const { matrix } = m.viewMatrix(blocks, args.tokens, args.view);
           return Array.from(matrix.subarray(3 * n, 4 * n));""",
        {"run": run["run_id"], "tokens": run["tokens"], "view": v},
    )
    expected = expected_view(weights, run["tokens"], v)[0][3]
    assert_same(got, expected)
    assert int(np.argmax(got)) == int(np.argmax(expected)) != int(np.argmax(weights[0, 5, 3]))  # block 0 alone differs


def test_mean_of_selected_rows(modules, server, api):
    run = analyze(api, *PAIR)
    weights = attention(api, run["run_id"])
    views = [view(3, 4), view(3, "mean", HEAD_SET, sinks="hide"), view(3, 4, block_mean=True, sinks="renormalise")]
    views.append(view(3, 4, sinks="renormalise", segments="AB"))
    rows = [2, 5, 11]
    got = in_chromium(
        modules,
        server,
        """const blocks = await load(args.run), n = args.tokens.length;
           return args.views.map((view) => {
             const { matrix, sink } = m.viewMatrix(blocks, args.tokens, view);
             return { row: plain(m.meanRow(matrix, n, args.rows)), sink: sink && m.meanOf(sink, args.rows) };
           });""",
        {"run": run["run_id"], "tokens": run["tokens"], "views": views, "rows": rows},
    )
    for v, result in zip(views, got, strict=True):
        matrix, sink = expected_view(weights, run["tokens"], v)
        assert_same(result["row"], matrix[rows].mean(axis=0), json.dumps(v))  # a blank cell stays blank
        assert (result["sink"] is None) == (sink is None)
        if sink is not None:
            assert result["sink"] == pytest.approx(sink[rows].mean(), abs=ATOL)
        if v["sinks"] == "renormalise" and v["segments"] == "all":
            assert np.nansum(np.array(result["row"], dtype=float)) == pytest.approx(1, abs=1e-5)


NAMES = [
    (view(2, 5), "block 2, head 5", "attention-weights-block2-head5"),
    (view(2, "mean"), "block 2, all 12 heads averaged", "attention-weights-block2-heads-mean"),
    (view(2, "mean", HEAD_SET), "block 2, heads 1, 4, 9 averaged", "attention-weights-block2-heads-1-4-9-mean"),
    (view(0, 5, block_mean=True), "all 6 blocks averaged, head 5", "attention-weights-blocks-mean-head5"),
    (
        view(2, "mean", HEAD_SET, True),
        "all 6 blocks averaged, heads 1, 4, 9 averaged",
        "attention-weights-blocks-mean-heads-1-4-9-mean",
    ),
    (
        view(1, 3, sinks="renormalise", segments="AB"),
        "renormalised block 1, head 3",
        "attention-weights-block1-head3-sinks-renormalise-AB",
    ),
    (
        view(4, "mean", ALL_HEADS, True, "hide"),
        "all 6 blocks averaged, all 12 heads averaged",
        "attention-weights-blocks-mean-heads-mean-sinks-hide",
    ),
]


def test_view_names_say_the_head_set_and_the_block_mean(modules, server):
    got = in_chromium(
        modules,
        server,
        "return args.views.map((view) => [m.viewName(view, args.model), m.viewFileName(view, args.model)]);",
        {"views": [v for v, *_ in NAMES], "model": MODEL},
    )
    assert got == [[name, file] for _, name, file in NAMES]


# --- the page: every view shows those numbers (needs the new layout's hooks) ------------------------------------------


def query_string(**params) -> str:
    return "?" + "&".join(f"{key}={quote(str(value), safe=',')}" for key, value in params.items())


def view_of_url(params: dict) -> dict:
    heads = [int(h) for h in params["heads"].split(",")] if "heads" in params else ALL_HEADS
    head = params.get("head", 0)
    return view(
        int(params.get("layer", 0)),
        head if head == "mean" else int(head),
        heads,
        params.get("blocks") == "mean",
        params.get("sinks", "show"),
        params.get("segments", "all"),
    )


def page_heatmap(page) -> tuple[np.ndarray, np.ndarray | None]:
    n, values, sink = page.evaluate(
        """(h => [h.n, Array.from(h.matrix, (v) => (Number.isNaN(v) ? null : v)), h.sink && Array.from(h.sink)])
           (document.getElementById('heatmap').heatmap)"""
    )
    return np.array(values, dtype=np.float64).reshape(n, n), None if sink is None else np.array(sink)


def attends_weights(page) -> dict[int, float]:
    rows = page.locator("#attends .attend-row").evaluate_all(
        "rows => rows.map((row) => [Number(row.dataset.index), Number(row.dataset.weight)])"
    )
    return {index: weight for index, weight in rows}


def eventually(check, timeout=20.0):
    """Retries an assertion until it holds (a view redraws after the state changes) or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run_of(api, params: dict) -> tuple[dict, np.ndarray]:
    run = analyze(api, params.get("text", DEFAULT_TEXT), params.get("pair"), params.get("mask", "bidirectional"))
    return run, attention(api, run["run_id"])


URLS = [
    {"layer": 0, "head": 2, "sinks": "renormalise", "token": 1},
    {"layer": 2, "head": "mean", "heads": "1,4,9", "sinks": "hide", "token": 3},
    {"layer": 0, "head": 5, "blocks": "mean", "token": 3},
    {"layer": 4, "head": "mean", "heads": "1,4,9", "blocks": "mean", "sinks": "renormalise", "token": 7},
    {"mask": "causal", "layer": 1, "head": 3, "sinks": "renormalise", "token": 1},
    {
        "text": PAIR[0],
        "pair": PAIR[1],
        "layer": 1,
        "head": "mean",
        "heads": "0,2",
        "segments": "AB",
        "sinks": "renormalise",
        "token": 2,
    },
]


@pytest.mark.parametrize(
    "params", URLS, ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items() if k not in ("text", "pair"))
)
def test_a_url_opens_its_view_with_numpys_numbers(page, server, api, params):
    open_lab(page, server, query_string(**params))
    run, weights = run_of(api, params)
    assert run_id(page) == run["run_id"]  # a run is named by its inputs: the same text, the same numbers
    wait_view(page, "heatmap", params["layer"], params["head"], params["token"])
    expected, sink = expected_view(weights, run["tokens"], view_of_url(params))

    def check():
        shown, shown_sink = page_heatmap(page)
        assert_same(shown, expected, "heatmap")
        if sink is None:
            assert shown_sink is None
        else:
            assert_same(shown_sink, sink, "heatmap sink")

    eventually(check)
    query = parse_qs(urlparse(page.url).query)
    for key, value in params.items():
        if key not in ("text", "pair"):
            assert query.get(key) == [str(value)], key


@pytest.mark.parametrize("sinks", SINK_MODES)
@pytest.mark.parametrize(
    "params",
    [{"layer": 3, "head": 4}, {"layer": 3, "head": "mean", "heads": "1,4,9", "blocks": "mean"}],
    ids=["one-head", "head-set-block-mean"],
)
def test_the_heatmap_and_the_attends_view_agree_cell_for_cell(page, server, api, sinks, params):
    token = 5
    open_lab(page, server, query_string(**params, sinks=sinks, token=token))
    run, weights = run_of(api, params)
    wait_view(page, "heatmap", params["layer"], params["head"], token)
    wait_view(page, "attends", params["layer"], params["head"], token)
    expected, expected_sink = expected_view(weights, run["tokens"], view_of_url({**params, "sinks": sinks}))

    def agree(rows):
        matrix, sink = page_heatmap(page)
        assert_same(matrix, expected, "heatmap")
        row = matrix[rows].mean(axis=0)
        listed = attends_weights(page)
        assert sorted(listed) == [int(i) for i in np.flatnonzero(~np.isnan(row))]  # every kept key, no blank one
        np.testing.assert_allclose([listed[i] for i in sorted(listed)], row[sorted(listed)], atol=ATOL, rtol=0)
        field = page.locator("#attends [data-field=sink] .attend-weight")
        if sinks == "show":
            assert field.count() == 0
        else:
            assert float(field.get_attribute("data-value")) == pytest.approx(sink[rows].mean(), abs=ATOL)
            assert float(field.get_attribute("data-value")) == pytest.approx(expected_sink[rows].mean(), abs=ATOL)

    eventually(lambda: agree([token]))
    page.locator('#tokens .token[data-index="7"]').click(modifiers=["Shift"])
    page.locator('#tokens .token[data-index="9"]').click(modifiers=["Shift"])
    page.mouse.move(5, 5)
    wait_until(page, "document.getElementById('heatmap').dataset.alsoRows === '7,9'")
    eventually(lambda: agree([token, 7, 9]))  # the attends view shows the mean of the selected rows


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_renormalised_query_the_on_the_page(page, server, api, mask):
    """The issue's numbers on the page: block 0, head 2, query "the", hide and renormalise."""
    open_lab(page, server, query_string(mask=mask, layer=0, head=2, sinks="renormalise", token=1))
    run, weights = run_of(api, {"mask": mask})
    wait_view(page, "heatmap", 0, 2, 1)
    wait_view(page, "attends", 0, 2, 1)
    kept = weights[0, 2, 1, 1:-1].astype(np.float64)
    expected = kept[0] / kept.sum()
    if mask == "causal":
        assert expected == 1

    def check():
        assert page_heatmap(page)[0][1, 1] == pytest.approx(expected, abs=ATOL)
        assert attends_weights(page)[1] == pytest.approx(expected, abs=ATOL)

    eventually(check)


@pytest.mark.parametrize("blocks", [False, True], ids=["block-2", "blocks-mean"])
def test_the_difference_view_uses_the_head_set(page, server, api, blocks):
    params = {"layer": 2, "head": "mean", "heads": "1,4,9", **({"blocks": "mean"} if blocks else {})}
    open_lab(page, server, query_string(**params, panel="lessons", lesson="difference"))
    page.wait_for_selector("#difference-run", state="visible")
    text_a, text_b = page.locator("#difference-a").input_value(), page.locator("#difference-b").input_value()
    mask_a = page.locator("#difference-mask-a").input_value()
    mask_b = page.locator("#difference-mask-b").input_value()
    page.click("#difference-run")
    a, wa = run_of(api, {"text": text_a, "mask": mask_a})
    b, wb = run_of(api, {"text": text_b, "mask": mask_b})
    v = view_of_url(params)
    expected = head_block_mean(wa, v) - head_block_mean(wb, v)

    def check():
        n, values = page.evaluate(
            """() => {
              const h = document.getElementById('difference-map')?.heatmap;
              return h?.matrix ? [h.n, Array.from(h.matrix, (v) => (Number.isNaN(v) ? null : v))] : [0, []];
            }"""
        )
        assert n == len(a["tokens"])
        assert_same(np.array(values, dtype=np.float64).reshape(n, n), expected, "difference")

    eventually(check)
    title = page.locator("#difference-map .hm-title").inner_text()
    assert "heads 1, 4, 9 averaged" in title
    assert ("all 6 blocks averaged" in title) == blocks


def test_predict_first_with_the_block_mean(page, server, api):
    open_lab(page, server, "?predict=1&blocks=mean&layer=0&head=5&token=3")
    run, weights = run_of(api, {})
    row = expected_view(weights, run["tokens"], view(0, 5, block_mean=True))[0][3]
    best = int(np.argmax(row))
    assert best != int(np.argmax(weights[0, 5, 3]))  # block 0's row alone would judge another answer right
    question = page.locator("#predict-question")
    question.wait_for(state="visible")
    assert "all 6 blocks averaged" in question.locator("h3").inner_text()
    page.locator(f'.predict-choice[data-index="{best}"]').click()
    result = page.locator("#predict-result")
    result.wait_for(state="visible")
    expect(result).to_contain_text("Right")
    field = result.locator("[data-field=best-weight]")
    if field.count():
        assert field.inner_text().strip() == f"{row.max():.4f}" and field.get_attribute("data-index") == str(best)
    else:  # a right answer may state the weight in its sentence only
        expect(result).to_contain_text(f"weight {row.max():.4f}")


def click_export(page, button: str):
    """An export button, opening the "Save" menu first if it is folded away."""
    if not page.locator(f"#{button}").is_visible():
        page.click("#export-menu")
    page.click(f"#{button}")


@pytest.mark.parametrize("sinks", ["show", "hide"])
def test_the_json_export_names_the_view_and_holds_its_numbers(page, server, api, sinks):
    params = {"layer": 2, "head": "mean", "heads": "1,4,9", "blocks": "mean", "sinks": sinks}
    open_lab(page, server, query_string(**params))
    wait_view(page, "heatmap", 2, "mean", 1)
    run, weights = run_of(api, {})
    expected = expected_view(weights, run["tokens"], view_of_url(params))[0]
    with page.expect_download() as download:
        click_export(page, "export-json")
    suffix = "" if sinks == "show" else f"-sinks-{sinks}"
    assert download.value.suggested_filename == f"attention-weights-blocks-mean-heads-1-4-9-mean{suffix}.json"
    exported = json.loads(open(download.value.path()).read())
    named = exported["view"]  # the view in words and as fields
    assert named["name"].startswith("all 6 blocks averaged, heads 1, 4, 9 averaged"), named
    assert named["heads"] == HEAD_SET and (named.get("blocks") == "mean" or named.get("blockMean") is True), named
    assert named["sinks"] == sinks, named
    assert_same(exported["matrix"], expected, "exported matrix")  # null where the view leaves a cell out
