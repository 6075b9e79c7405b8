"""The lab's widget in JupyterLab: JupyterLab started here on a loopback port with a token, a notebook beside an
app.py of its own, driven in the suite's chromium (every request recorded: none may leave 127.0.0.1). The widget
draws the page's views with the engine's numbers, a token clicked moves the attends view to that token's row and
reaches Python, and Python moves the views."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nbformat
import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from app.engine.engine import Engine
from tests.browser import audit
from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_grid_switch import SWITCH
from tests.conftest import free_port
from tests.float32 import tolerance

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The animal didn't cross the street because it was too tired"
TOKEN = "t0k3n-for-this-test"
# The widget's shadow root, found in the notebook's output (the views draw there, root.js).
WIDGET = (
    "[...document.querySelectorAll('.jp-OutputArea-output *')]"
    ".find((e) => e.shadowRoot?.getElementById('heatmap'))?.shadowRoot"
)
WRITE_TEXT = "The cat sat on the mat. The cat"
PAIR_SOURCE, PAIR_TARGET = "The cat sat on the mat.", "A quick brown fox jumps."
KNOBS = {"max_new_tokens": 10, "do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.9}
CELLS = [
    f"from attention_lab import show\nw = show({TEXT!r}, block=2, head=0)\nw",
    "print(w.token)",
    "w.block, w.head = 4, 1",
    "print(w.measure, w.block, w.head)",
    # A decoder in memory writes in its widget's Write panel; generate's tokens for the same knobs, beside it.
    "import json, torch\nfrom tests.families import gpt2_objects\ntorch.manual_seed(0)\n"
    f"gpt2, tokenizer = gpt2_objects()\ng = show({WRITE_TEXT!r}, gpt2, tokenizer, panel='write')\ng",
    f"prompt = tokenizer({WRITE_TEXT!r}, return_tensors='pt').input_ids\ntorch.manual_seed(3)\n"
    f"print(json.dumps(gpt2.generate(prompt, **{KNOBS!r})[0, prompt.shape[1]:].tolist()))",
    # An encoder-decoder (a tiny Marian folder built in the kernel): its source, its target and cross-attention.
    "from pathlib import Path\nfrom tests.families import build\n"
    "marian = build('marian', Path('marian').resolve())\n"  # in the notebook's folder, which the test removes
    f"m = show({PAIR_SOURCE!r}, str(marian), target={PAIR_TARGET!r}, block=1, head=2, token=3)\nm",
    "print(json.dumps([str(marian), m.kind, m.token]))",
]
# The encoder-decoder's widget, in its cell's output.
PAIR = (
    "[...document.querySelectorAll('.jp-Notebook .jp-Cell')[6].querySelectorAll('.jp-OutputArea-output *')]"
    ".find((e) => e.shadowRoot?.getElementById('heatmap'))?.shadowRoot"
)
# The decoder's widget, in its cell's output.
WRITER = (
    "[...document.querySelectorAll('.jp-Notebook .jp-Cell')[4].querySelectorAll('.jp-OutputArea-output *')]"
    ".find((e) => e.shadowRoot?.getElementById('write'))?.shadowRoot"
)


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab on a free 127.0.0.1 port, its notebook folder holding widget.ipynb and an app.py; its settings
    and data in folders of its own (no news fetched, no update checked)."""
    home = tmp_path_factory.mktemp("jupyterlab")
    folder = home / "notebooks"
    folder.mkdir()
    (folder / "app.py").write_text('raise SystemExit("the notebook folder\'s own app.py, not the lab")\n')
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    notebook.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / "widget.ipynb")
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # the kernel imports this checkout's attention_lab
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
    }
    command = [
        *(sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}"),
        *(f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={folder}"),
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    log = home / "jupyterlab.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _answers(f"{url}/api/status?token={TOKEN}"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"JupyterLab did not start:\n{log.read_text()}")
        time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def run_cell(page, index: int):
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")


def shown(page, expression: str):
    """A value read in the widget's shadow root (`root`)."""
    return page.evaluate(f"() => {{ const root = {WIDGET}; return {expression}; }}")


def wait_in_widget(page, condition: str, timeout: float = 120):
    wait_until(page, f"(() => {{ const root = {WIDGET}; return root && ({condition}); }})()", timeout)


def settle(page):
    """Waits for the widget's layout after a resize: its boxes the same three times running, 100 ms apart."""
    boxes = (
        "[...root.querySelectorAll('.lab-widget, .heatmap-column, .side, .panels, .hm-canvas')]"
        ".map((e) => JSON.stringify(e.getBoundingClientRect())).join()"
    )
    history = [shown(page, boxes)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (len(history) >= 3 and len(set(history[-3:])) == 1):
        page.wait_for_timeout(100)
        history.append(shown(page, boxes))


# The page's type floor on a laptop-sized screen (Present at 1024×768, README "Using the page"): 16 px for every
# text, labels, ids and numbers included.
FLOOR = 16


def read_whole(page, where: str) -> list[str]:
    """Everything wrong in the widget as it is drawn (tests/browser/audit.js in its shadow root): a text or
    control cut, ellipsised or past the window, or under the floor."""
    root = page.evaluate_handle(f"() => {WIDGET}")
    return [f"{where}: {problem}" for problem in audit.problems(page, FLOOR, FLOOR, ".lab-widget", True, root)]


@pytest.mark.slow
def test_the_widget_in_jupyterlab_draws_the_engines_numbers_and_follows_clicks(jupyterlab, page, minilm):
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{jupyterlab}/lab/tree/widget.ipynb?token={TOKEN}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    wait_until(page, "document.querySelector('.jp-Notebook .jp-InputArea-editor .cm-content')", 60)
    # A cell run before the kernel has connected is dropped: wait for the status bar's "Idle".
    wait_until(
        page,
        "[...document.querySelectorAll('.jp-StatusBar-TextItem')].some((e) => /\\bIdle\\b/.test(e.textContent))",
        120,
    )
    run_cell(page, 0)
    wait_in_widget(page, "root.getElementById('heatmap').dataset.view?.endsWith(':2:0:1')")
    wait_in_widget(page, "root.getElementById('attends').dataset.view?.endsWith(':2:0:1')")
    engine = Engine(minilm, 1000)
    run = engine.compute(engine.spec(TEXT))
    n = len(run.tokens)
    chips = shown(page, "[...root.querySelectorAll('#tokens .token')].map((chip) => Number(chip.dataset.id))")
    assert chips == [token.id for token in run.tokens]
    drawn = np.array(shown(page, "Array.from(root.getElementById('heatmap').heatmap.matrix)"), np.float32)
    np.testing.assert_array_equal(drawn.reshape(n, n), run.weights(2)[0].numpy())  # bit for bit: same shapes (lone)

    # A token clicked: the attends view is that token's row, the heatmap outlines it, and Python reads it.
    page.locator(".jp-OutputArea-output #tokens .token[data-index='9']").click()
    wait_in_widget(page, "root.getElementById('attends').dataset.view?.endsWith(':2:0:9')")
    assert shown(page, "root.getElementById('heatmap').dataset.selectedRow") == "9"
    weights = shown(
        page,
        "[...root.querySelectorAll('#attends .attend-row')]"
        ".map((row) => [Number(row.dataset.index), Number(row.dataset.weight)])",
    )
    row = run.weights(2)[0][9].numpy()
    assert [index for index, _ in weights] == list(range(n))
    # bit for bit: same shapes (the widget's lone pass, run again here)
    np.testing.assert_array_equal(np.array([weight for _, weight in weights], np.float32), row)
    assert screenshot(page, "notebook-widget-jupyterlab").stat().st_size > 0  # the README's picture (docs/)
    # The heatmap's labels and the tokens' ids are read at the page's floor, and nothing in the widget is cut.
    sizes = shown(
        page,
        "Object.fromEntries(['#heatmap .hm-ylabels span', '#heatmap .hm-xlabels span', '#tokens .token-id'].map("
        "(s) => [s, [...root.querySelectorAll(s)].map((e) => parseFloat(getComputedStyle(e).fontSize))]))",
    )
    assert all(sizes.values()), sizes
    problems = [f"{where}: {min(found)} px < {FLOOR}" for where, found in sizes.items() if min(found) < FLOOR]
    problems += read_whole(page, "the heatmap and the attends view")
    run_cell(page, 1)
    output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output")
    output.wait_for(timeout=60_000)
    assert output.inner_text().strip() == "9"

    # Python moves the views: a new block and head, drawn with the engine's numbers.
    run_cell(page, 2)
    wait_in_widget(page, "root.getElementById('heatmap').dataset.view?.endsWith(':4:1:9')")
    drawn = np.array(shown(page, "Array.from(root.getElementById('heatmap').heatmap.matrix)"), np.float32)
    np.testing.assert_array_equal(drawn.reshape(n, n), run.weights(4)[1].numpy())  # bit for bit: same shapes (lone)
    assert shown(page, "root.querySelector('select[data-key=layer]').value") == "4"

    # The panels: the worked example of this query in this head, and every head, one click opening it.
    page.locator(".jp-OutputArea-output #panel-tab-dissection").click()
    wait_in_widget(page, "root.getElementById('dissection').dataset.view?.endsWith(':4:1:9')")
    top = shown(page, "root.querySelector('#dissection [data-field=top-key]').dataset.index")
    assert int(top) == int(run.weights(4)[1][9].argmax())
    page.locator(".jp-OutputArea-output #panel-tab-grid").click()
    wait_in_widget(
        page,
        "root.getElementById('grid').dataset.view?.startsWith(root.getElementById('heatmap').dataset.view.split(':')[0])",
    )
    # The panel's switch is whole in the side column, as is all the rest.
    switch = shown(page, f"({SWITCH})(root)")
    assert switch["text"] == "share on [CLS]+[SEP] (S) and on “.”", switch
    problems += [f"the switch: {problem}" for problem in switch["problems"]]
    problems += read_whole(page, "every head")
    page.locator(".jp-OutputArea-output .panels").scroll_into_view_if_needed()
    screenshot(page, "notebook-widget-every-head")
    # A laptop's window: JupyterLab's sidebar open, the notebook narrower.
    page.set_viewport_size({"width": 1280, "height": 720})
    settle(page)
    problems += [f"1280×720: {problem}" for problem in shown(page, f"({SWITCH})(root)")["problems"]]
    problems += read_whole(page, "every head at 1280×720")
    page.locator(".jp-OutputArea-output .panels").scroll_into_view_if_needed()
    screenshot(page, "notebook-widget-every-head-1280x720")
    # MiniLM's Write panel: the lab's sentence that it reads and does not write, whole.
    page.locator(".jp-OutputArea-output #panel-tab-write").click()
    wait_in_widget(page, "root.querySelector('#write [data-field=cannot-write]')")
    said = shown(page, "root.querySelector('#write [data-field=cannot-write]').textContent")
    assert said == f"{minilm.cannot_write}."
    problems += read_whole(page, "the Write panel at 1280×720")
    assert problems == [], "\n".join(problems)
    page.locator(".jp-OutputArea-output #panel-tab-grid").click()
    page.set_viewport_size({"width": 1400, "height": 1000})
    settle(page)
    page.locator(".jp-OutputArea-output #grid .grid-cell[data-layer='0'][data-head='5']").click()
    wait_in_widget(page, "root.getElementById('heatmap').dataset.view?.endsWith(':0:5:9')")

    # The Measure switch: the views are redrawn in the norm-weighted attention, named so, and Python reads it.
    page.locator(".jp-OutputArea-output select[data-key=measure]").select_option("norm")
    wait_in_widget(page, "root.getElementById('attention-name').textContent.startsWith('norm-weighted attention')")
    wait_in_widget(page, "root.getElementById('heatmap').heatmap.title.textContent.startsWith('norm-weighted')")
    run_cell(page, 3)
    output = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea-output")
    output.wait_for(timeout=60_000)
    assert output.inner_text().strip() == "norm 0 5"

    # A decoder's widget writes token by token: its Write panel's tokens grow as the kernel relays each step, and
    # they are the ones model.generate writes with the same knobs after torch.manual_seed.
    run_cell(page, 4)
    writer = page.locator(".jp-Notebook .jp-Cell").nth(4)
    wait_until(page, f"{WRITER}?.getElementById('write-go')", 120)
    writer.locator("#write-max").fill(str(KNOBS["max_new_tokens"]))
    writer.locator("#write-sample").check()
    for knob in ("temperature", "top_k", "top_p"):
        writer.locator(f"#write-{knob.replace('_', '-')}").fill(str(KNOBS[knob]))
    writer.locator("#write-seed").fill("3")
    page.evaluate(
        f"""() => {{
          const root = {WRITER};
          window.grown = [];
          const tokens = root.getElementById('write-tokens');
          new MutationObserver(() => grown.push(tokens.querySelectorAll('.written').length))
            .observe(tokens, {{ childList: true }});
        }}"""
    )
    writer.locator("#write-go").click()
    wait_until(page, f"{WRITER}.getElementById('write-status').textContent.startsWith('Written: 10 tokens')", 60)
    grown = page.evaluate("() => grown")
    assert grown == sorted(grown) and grown[-1] == 10 and any(0 < count < 10 for count in grown), grown  # it grew
    written = page.evaluate(f"() => [...{WRITER}.querySelectorAll('#write-tokens .written')].map((c) => +c.dataset.id)")
    run_cell(page, 5)
    output = page.locator(".jp-Notebook .jp-Cell").nth(5).locator(".jp-OutputArea-output")
    output.wait_for(timeout=60_000)
    assert written == json.loads(output.inner_text())

    # An encoder-decoder's widget: the source and the target, cross-attention's row of target token 3 (block 1,
    # head 2) as transformers' eager pass reads the folder; a target token clicked reaches Python; the kind picker
    # opens the encoder's self-attention.
    run_cell(page, 6)
    wait_until(page, f"{PAIR}?.querySelector('#attends .attend-queries li.selected')?.dataset.index === '3'", 120)
    sides = page.evaluate(f"() => [...{PAIR}.querySelectorAll('#tokens .pair-side-name')].map((e) => e.textContent)")
    assert sides == ["Source", "Target"]
    run_cell(page, 7)
    output = page.locator(".jp-Notebook .jp-Cell").nth(7).locator(".jp-OutputArea-output")
    output.wait_for(timeout=60_000)
    folder, kind, token = json.loads(output.inner_text())
    assert (kind, token) == ("cross", 3)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    target = [0, *tokenizer(text_target=PAIR_TARGET)["input_ids"]]  # the decoder's start token, then the target
    with torch.inference_mode():
        out = model(
            input_ids=tokenizer(PAIR_SOURCE, return_tensors="pt")["input_ids"],
            decoder_input_ids=torch.tensor([target]),
            output_attentions=True,
        )
    drawn = page.evaluate(
        f"() => [...{PAIR}.querySelectorAll('#attends .attend-keys > li')].map((li) => +li.dataset.weight)"
    )
    np.testing.assert_allclose(drawn, out.cross_attentions[1][0, 2, 3].numpy(), atol=tolerance(5 * 64))
    page.locator(".jp-Notebook .jp-Cell").nth(6).locator(
        '#tokens .pair-chips[data-side="target"] .token[data-index="4"]'
    ).click()
    run_cell(page, 7)
    wait_until(page, "document.querySelectorAll('.jp-Notebook .jp-Cell')[7].innerText.includes('\"cross\", 4]')", 60)
    page.locator(".jp-Notebook .jp-Cell").nth(6).locator("select").first.select_option("encoder")
    wait_until(
        page, f"{PAIR}.querySelector('#heatmap .hm-title').textContent.includes('encoder self-attention, block 1')"
    )
    screenshot(page, "notebook-widget-encoder-decoder")
