"""The lab in a notebook (attention_lab.show): a notebook executed by nbclient in a folder that holds an app.py
of its own, the widgets' state as a front end receives it compared with the engine's numbers for MiniLM, a tiny
GPT-2 object in memory and a model folder; the kernel's side of the views' transport; a running lab's link."""

import base64
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path
from urllib.parse import urlencode

import httpx
import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient
from transformers import AutoModelForSeq2SeqLM

from app.engine.engine import Engine
from app.engine.model import ModelLoadError, adopt
from app.web.encoding import decode_attention
from tests.families import build, gpt2_objects
from tests.float32 import tolerance

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The animal didn't cross the street because it was too tired"
SHORT = "The cat sat on the mat."
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def execute(cells: list[str], folder: Path) -> nbformat.NotebookNode:
    """The notebook's cells run by nbclient in `folder`, with the widgets' state stored as a front end gets it."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        store_widget_state=True,
    )
    client.execute()
    return notebook


def weights_of(state: dict) -> np.ndarray:
    """The first view's matrix the widget's `run` carries (the analyze answer's `attention`), [query, key]."""
    attention = state["run"]["attention"]
    assert attention["dtype"] == "float32" and attention["shape"][:2] == [1, 1]  # one head, not the run's every head
    values = np.frombuffer(base64.b64decode(attention["data"]), "<f4")
    return values.reshape(attention["shape"][2:])


def engine_run(loaded, text: str):
    engine = Engine(loaded, 1000)
    return engine.compute(engine.spec(text))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, tiny_model_dir):
    """One kernel, three widgets: the packaged MiniLM, a tiny GPT-2 built in the kernel, a model folder."""
    folder = tmp_path_factory.mktemp("notebook")
    (folder / "app.py").write_text('raise SystemExit("the notebook folder\'s own app.py, not the lab")\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's attention_lab (and tests/)
        executed = execute(
            [
                "import json, torch\nfrom attention_lab import show\nfrom tests.families import gpt2_objects",
                f"minilm = show({TEXT!r}, block=2, head=3, token=5)",
                "torch.manual_seed(0)\nmodel, tokenizer = gpt2_objects()\n"
                f"gpt = show({SHORT!r}, model, tokenizer, block=1, head=2)",
                f"folder = show({SHORT.lower()!r}, {str(tiny_model_dir)!r}, layer=1, head=1)",
                "print(json.dumps({'minilm': minilm.model_id, 'gpt': gpt.model_id, 'folder': folder.model_id}))",
            ],
            folder,
        )
    ids = json.loads(executed.cells[-1].outputs[0]["text"])
    models = executed.metadata.widgets[WIDGET_STATE]["state"]
    return {name: models[model_id]["state"] for name, model_id in ids.items()}


def test_the_widget_sends_the_pages_own_view_modules(notebook):
    modules = dict(notebook["minilm"]["_modules"])
    for name in ("views.js", "tokens.js", "attention.js", "attends.js", "grid.js", "dissection.js", "heatmap.js"):
        assert modules[name] == (ROOT / "static" / "js" / name).read_text()
    names = [name for name, _ in notebook["minilm"]["_modules"]]
    assert names.index("matrix.js") < names.index("attends.js")  # each module after those it imports
    assert "state.js" not in names and "controls.js" not in names  # nothing of the page's URL state or controls


def test_minilm_in_the_notebook_has_the_engines_numbers(notebook, minilm):
    state = notebook["minilm"]
    run = engine_run(minilm, TEXT)
    assert [token["id"] for token in state["run"]["tokens"]] == [token.id for token in run.tokens]
    assert (state["block"], state["head"], state["token"], state["measure"]) == (2, 3, 5, "weights")
    assert state["config"]["model"]["name"] == "sentence-transformers/all-MiniLM-L6-v2"
    np.testing.assert_array_equal(weights_of(state), run.weights(2)[3].numpy())  # bit for bit: same shapes (lone)


def test_a_gpt2_object_in_memory_is_read_by_its_adapter(notebook):
    state = notebook["gpt"]
    torch.manual_seed(0)
    model, tokenizer = gpt2_objects()
    run = engine_run(adopt(model, tokenizer), SHORT)
    info = state["config"]["model"]
    assert (info["family"], info["attention_only"], info["layers"], info["heads"]) == ("GPT-2", None, 2, 4)
    assert [token["id"] for token in state["run"]["tokens"]] == [token.id for token in run.tokens]
    np.testing.assert_array_equal(weights_of(state), run.weights(1)[2].numpy())  # bit for bit: same shapes (lone)


def test_a_folder_is_read_as_the_labs_settings_read_one(notebook, tiny, tiny_model_dir):
    state = notebook["folder"]
    assert state["config"]["model"]["name"] == tiny_model_dir.name
    assert (state["block"], state["head"], state["config"]["model"]["heads"]) == (1, 1, 4)
    run = engine_run(tiny, SHORT.lower())
    assert [token["id"] for token in state["run"]["tokens"]] == [token.id for token in run.tokens]
    np.testing.assert_array_equal(weights_of(state), run.weights(1)[1].numpy())  # bit for bit: same shapes (lone)


def test_another_measure_is_asked_for_as_the_view_draws_not_with_the_run():
    from attention_lab import show

    widget = show(SHORT, measure="norm")
    assert widget.run["attention"] is None and widget.first_view == {}


def answer(widget, url: str, method: str = "GET", body: str | None = None, timeout: float = 60) -> tuple[dict, bytes]:
    """A view's request as widget.js sends it, and the message and buffer the kernel sends back."""
    sent = []
    widget.send = lambda content, buffers=None: sent.append((content, buffers))
    widget._on_message(widget, {"kind": "fetch", "id": "v:1", "url": url, "method": method, "body": body}, [])
    deadline = time.monotonic() + timeout
    while not sent:
        assert time.monotonic() < deadline, f"no answer to {url} in {timeout} s"
        time.sleep(0.01)
    content, buffers = sent[0]
    return content, bytes(buffers[0]) if buffers else b""


def test_the_kernel_answers_a_views_request_in_the_labs_compact_form(minilm):
    from attention_lab import show

    widget = show(SHORT, block=0, head=0)
    run = engine_run(minilm, SHORT)
    url = f"/api/runs/{widget.run['run_id']}/attention?layer=1&dtype=uint8"
    content, body = answer(widget, url)
    assert content["id"] == "v:1" and content["status"] == 200
    assert content["headers"]["x-attention-dtype"] == "uint8"
    received = decode_attention(body, {name.title(): value for name, value in content["headers"].items()})
    n = len(run.tokens)
    assert received.shape == (1, 12, n, n) and len(body) == 12 * n * n  # one byte a weight
    np.testing.assert_allclose(received[0], run.weights(1).numpy(), atol=1 / 510 + 1e-7)
    # The lab's own error sentence, and nothing but its API.
    content, body = answer(widget, f"/api/runs/{widget.run['run_id']}/attention?layer=9")
    assert content["status"] == 404 and "layer 9 does not exist" in json.loads(body)["detail"]
    content, _ = answer(widget, "/docs")
    assert "error" in content and "API" in content["error"]


def test_selection_is_checked_and_a_new_text_runs_again():
    from attention_lab import show

    widget = show(SHORT, token=3)
    with pytest.raises(Exception, match="block 6 does not exist"):
        widget.block = 6
    with pytest.raises(Exception, match="token 40 does not exist"):
        widget.token = 40
    with pytest.raises(TypeError, match="takes no colour"):
        show(SHORT, colour="red")
    first = widget.run["run_id"]
    widget.text = "Rain fell."
    assert widget.run["run_id"] != first and widget.run["tokens"][1]["text"] == "rain"
    assert widget.token == 3  # still a token of the new run


def test_a_model_object_is_refused_where_the_lab_cannot_read_it_as_it_is():
    from attention_lab import show

    model, tokenizer = gpt2_objects()
    with pytest.raises(Exception, match="needs its tokenizer"):
        show(SHORT, model)
    with pytest.raises(ModelLoadError, match="float64: the lab reads float32, bfloat16, float16"):
        show(SHORT, model.double(), tokenizer)


def test_attention_lab_says_so_when_another_app_was_imported_first(tmp_path):
    (tmp_path / "app.py").write_text("NAME = 'the notebook folder app'\n")
    check = "import app\ntry:\n    import attention_lab\nexcept ImportError as error:\n    print(error)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    said = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "another module named app" in said.stdout and "import attention_lab first" in said.stdout


def deflated_link(server: str, pairs: list[list[str]]) -> str:
    """A long view's link as the page writes it (static/js/state.js): JSON pairs, deflate-raw, base64url."""
    deflater = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    packed = deflater.compress(json.dumps(pairs).encode()) + deflater.flush()
    return f"{server}/#z={base64.urlsafe_b64encode(packed).decode().rstrip('=')}"


def test_a_running_labs_link_opens_its_run_and_view(server):
    from attention_lab import show

    view = {"text": TEXT, "layer": 4, "head": "mean", "heads": "1,5", "token": 7, "sinks": "hide"}
    link = f"{server}/?{urlencode(view)}"
    widget = show(run=link)
    held = httpx.post(f"{server}/api/analyze", json={"text": TEXT}, timeout=60).json()
    assert widget.run["run_id"] == held["run_id"]  # the run the lab holds: its id is its content's hash
    assert (widget.block, widget.head, widget.heads, widget.token, widget.sinks) == (4, "mean", [1, 5], 7, "hide")
    url = f"/api/runs/{held['run_id']}/attention?layer=4&heads=1,5&dtype=float32"
    content, body = answer(widget, url)
    expected = httpx.get(f"{server}{url}", timeout=60).content
    assert content["status"] == 200 and body == expected  # the lab's own bytes, passed on as they came
    compressed = show(run=deflated_link(server, [["text", SHORT], ["layer", "2"], ["head", "1"], ["measure", "alti"]]))
    assert (compressed.run["tokens"][1]["text"], compressed.block, compressed.measure) == ("the", 2, "alti")
    patch = {
        "source": "A dog sat on the rug.",
        "site": "resid_pre",
        "layer": 2,
        "head": None,
        "positions": [2],
        "sources": [2],
    }
    patched = show(run=f"{server}/?{urlencode({'text': SHORT, 'patch': json.dumps(patch), 'panel': 'lessons'})}")
    held = httpx.post(f"{server}/api/analyze", json={"text": SHORT, "patch": patch}, timeout=60).json()
    assert patched.run["run_id"] == held["run_id"] and patched.run["patch"] == patch
    assert patched.panel is None  # an experiment's panel is not the widget's: left closed
    fresh = show(SHORT, lab=server, block=1)  # a new run on the running lab, of its default model
    assert fresh.run["run_id"] == httpx.post(f"{server}/api/analyze", json={"text": SHORT}, timeout=60).json()["run_id"]


def test_a_long_run_sends_one_heads_matrix_first_not_every_head():
    from attention_lab import show

    widget = show(" ".join(["word"] * 600), block=5, head=11)
    assert len(widget.run["tokens"]) == 512
    assert widget.run["attention"]["shape"] == [1, 1, 512, 512]  # one head of the run's 72, 1 MiB in float32


def relayed(widget, url: str, body: dict, leave=lambda messages: False, timeout: float = 60) -> list[tuple]:
    """A stream asked as widget.js asks it: (message, buffer) for each message the kernel sends back, the answer
    (streamed), each part and the end. `leave(messages)` true: the view leaves the stream (abort) there."""
    sent = []
    widget.send = lambda content, buffers=None: sent.append((content, bytes(buffers[0]) if buffers else b""))
    asked = {"kind": "fetch", "id": "v:1", "url": url, "method": "POST", "body": json.dumps(body)}
    widget._on_message(widget, asked, [])
    deadline = time.monotonic() + timeout
    while not (sent and sent[-1][0]["kind"] == "end"):
        assert time.monotonic() < deadline, f"no end to {url} in {timeout} s: {[m for m, _ in sent]}"
        if sent and leave(sent):
            widget._on_message(widget, {"kind": "abort", "id": "v:1"}, [])
            return sent
        time.sleep(0.002)
    return sent


def events_of(parts: list[bytes]) -> list[tuple[str, dict]]:
    blocks = [block for block in b"".join(parts).decode().split("\n\n") if block.startswith("event: ")]
    return [(block.split("\n")[0][len("event: ") :], json.loads(block.split("data: ", 1)[1])) for block in blocks]


def test_a_decoder_writes_in_the_widget_through_the_kernel_token_by_token():
    """The widget's Write panel asks the kernel for a writing's stream (api.write through widget.js's transport):
    the kernel relays each event as the lab writes it, every step in a part of its own, the tokens
    model.generate writes after torch.manual_seed; a view that leaves the stream calls the writing off."""
    from app.notebook.labs import _kernel_labs
    from attention_lab import show

    torch.manual_seed(0)
    model, tokenizer = gpt2_objects()
    widget = show(SHORT, model, tokenizer, panel="write")
    names = [name for name, _ in widget._modules]
    assert "write.js" in names and "written-step.js" in names and "controls.js" not in names
    knobs = {"max_new_tokens": 6, "do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 3}
    sent = relayed(widget, "/api/generate/stream", {"text": SHORT, **knobs})
    (head, nothing), *parts, (end, _) = sent
    assert head["kind"] == "answer" and head["status"] == 200 and head["streamed"] and nothing == b""
    assert head["headers"]["content-type"].startswith("text/event-stream")
    assert all(message["kind"] == "part" for message, _ in parts) and end == {"kind": "end", "id": "v:1"}
    events = events_of([piece for _, piece in parts])
    assert [name for name, _ in events] == ["writing"] + ["step"] * 6 + ["done"]
    # Token by token: no part holds two steps, so each reached the view as it was written.
    assert all(piece.count(b"event: step") <= 1 for _, piece in parts)
    done = events[-1][1]
    prompt = torch.tensor([[token["id"] for token in events[0][1]["prompt"]]])
    with torch.random.fork_rng():
        torch.manual_seed(knobs["seed"])
        kwargs = {name: value for name, value in knobs.items() if name != "seed"}
        expected = model.generate(prompt, **kwargs)[0, prompt.shape[1] :].tolist()
    assert done["ids"] == expected == [step["token"] for name, step in events if name == "step"]

    # Left after its first step: the lab calls the writing off long before the 50 tokens asked for.
    first_step = lambda sent: any(b"event: step" in piece for _, piece in sent)  # noqa: E731
    sent = relayed(widget, "/api/generate/stream", {"text": SHORT, "max_new_tokens": 50, "seed": 4}, first_step)
    writings = next(lab for lab in _kernel_labs.values() if lab is widget._lab).client._transport.app.state.writings
    deadline = time.monotonic() + 30
    while writings._live:
        assert time.monotonic() < deadline, "the writing was not called off"
        time.sleep(0.01)
    assert all(message["kind"] in ("answer", "part") for message, _ in sent)
    assert sum(piece.count(b"event: step") for _, piece in sent) < 50


def test_an_encoder_decoder_shows_its_source_target_and_three_kinds_of_attention(tmp_path):
    """A tiny Marian folder in the widget: its source and target, every kind's weights in the run as transformers'
    eager pass gives them, the selection checked against the kind's own stack and rows, a new target read again."""
    from attention_lab import show

    folder = build("marian", tmp_path / "marian")
    target = "A quick brown fox jumps."
    widget = show(SHORT, str(folder), target=target, kind="cross", block=2, head=1, token=3)
    run = widget.run
    assert run["kind"] == "encoder-decoder" and widget.info["decoder_layers"] == 3
    assert "seq2seq/views.js" in dict(widget._modules)
    ids = {side: [token["id"] for token in run[side]["tokens"]] for side in ("source", "target")}
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([ids["source"]]),
            decoder_input_ids=torch.tensor([ids["target"]]),
            output_attentions=True,
        )
    expected = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    for kind, layers in expected.items():
        weights = np.array(run["attention"][kind]["weights"])
        np.testing.assert_allclose(weights, np.stack([layer[0].numpy() for layer in layers]), atol=tolerance(5 * 64))
    with pytest.raises(Exception, match="block 3 does not exist"):
        widget.block = 3  # the decoder has 3 blocks
    widget.kind = "encoder"  # the encoder has 2: block 2 becomes its last, token 3 stays a source token
    assert (widget.block, widget.token) == (1, 3)
    with pytest.raises(Exception, match=f"token {len(ids['source'])} does not exist"):
        widget.token = len(ids["source"])
    widget.target = "The cat."
    assert widget.run["target"]["text"] == "The cat." and widget.run["run_id"] != run["run_id"]
    with pytest.raises(Exception, match="reads one text"):
        show(SHORT, target="Die Katze.")
