"""Start-up: the model folder setting, and a clear one-line failure for a bad folder."""

import gc
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.engine.model import ModelLoadError, load_model
from app.main import create_app
from app.settings import get_settings
from tests.conftest import LAB_PROTOCOL, Ended, free_port, run_app, zygote


def broken(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    return folder


def damaged_store(folder: Path) -> Path:
    (folder / "runs.sqlite3").write_text("not a database " * 100)
    return folder


def store_refusal(folder: Path) -> str:
    return (
        f"attention-lab: the run store (sqlite {folder / 'runs.sqlite3'}) could not be opened: file is not a database"
    )


def uvicorn_run(data: Path) -> subprocess.CompletedProcess:
    """`uvicorn app.main:app` as an operator runs it: a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--http", LAB_PROTOCOL, "--port", str(free_port())],
        env={**os.environ, "ATTENTION_LAB_DATA_DIR": str(data)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def with_workers(count: int) -> list[str]:
    return ["--workers", str(count), "--port", str(free_port())]


Start = Callable[[Path], Ended | subprocess.CompletedProcess]
STARTS: dict[str, tuple[Callable[[Path], Path], Start]] = {  # a start's name: (its folder made, the start)
    "missing": (
        lambda folder: folder / "no-such-model",
        lambda missing: run_app([], {"ATTENTION_LAB_MODEL_PATH": str(missing)}),
    ),
    "broken": (
        lambda folder: broken(folder / "model"),
        lambda model: run_app([], {"ATTENTION_LAB_MODEL_PATH": str(model)}),
    ),
    "damaged-store": (damaged_store, lambda data: run_app([], {"ATTENTION_LAB_DATA_DIR": str(data)})),
    "damaged-store-uvicorn": (damaged_store, uvicorn_run),
    "missing-with-workers": (
        lambda folder: folder / "no-such-model",
        lambda missing: run_app(with_workers(2), {"ATTENTION_LAB_MODEL_PATH": str(missing)}),
    ),
    "cross-encoder-missing": (
        lambda folder: folder / "no-such-cross-encoder",
        lambda missing: run_app(with_workers(1), {"ATTENTION_LAB_CROSS_ENCODER": str(missing)}),
    ),
    "cross-encoder-broken-with-workers": (
        lambda folder: broken(folder / "broken"),
        lambda model: run_app(with_workers(2), {"ATTENTION_LAB_CROSS_ENCODER": str(model)}),
    ),
}


@pytest.fixture(scope="module")
def starts(tmp_path_factory) -> dict[str, tuple[Path, Future]]:
    """The module's failing starts, each with the folder it was given, all begun as the module begins. Each is a
    process of its own that ends once it has said why, mostly one core's work (imports, reading MiniLM, ending
    the interpreter): begun together they share the two cores, and the tests below run beside them, rather than
    each start waiting for the one before it."""
    folders = {name: made(tmp_path_factory.mktemp(name)) for name, (made, _) in STARTS.items()}
    with ThreadPoolExecutor(len(STARTS)) as pool:
        # The fresh uvicorn process asks nothing of the zygote: its imports run beside the zygote's own.
        fresh = {"damaged-store-uvicorn": pool.submit(uvicorn_run, folders["damaged-store-uvicorn"])}
        zygote()  # started before the threads ask it for forks
        yield {
            name: (folders[name], fresh[name] if name in fresh else pool.submit(start, folders[name]))
            for name, (_, start) in STARTS.items()
        }


def test_missing_folder_fails_with_one_line_naming_it(starts):
    missing, result = starts["missing"]
    result = result.result()
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [f"attention-lab: model folder {missing} does not exist"]


def test_broken_folder_fails_with_one_line_naming_it(starts):
    folder, result = starts["broken"]
    result = result.result()
    assert result.returncode != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(folder) in lines[0] and "Traceback" not in result.output


def test_a_non_bert_folder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8}')
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        load_model(tmp_path)


def test_setting_points_the_app_at_another_local_folder(monkeypatch, tiny_model_dir):
    monkeypatch.setenv("ATTENTION_LAB_MODEL_PATH", str(tiny_model_dir))
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as client:
            model = client.get("/api/model").json()
            assert (model["name"], model["layers"], model["heads"], model["head_dim"]) == ("tiny-bert0", 2, 4, 12)
            body = client.post("/api/analyze", json={"text": "a tiny model"}).json()
            head = client.get(f"/api/runs/{body['run_id']}/layers/1/heads/3").json()
            assert len(head["q"][0]) == 12
    finally:
        get_settings.cache_clear()


def test_what_the_lab_holds_from_its_start_is_out_of_the_cycle_collectors_way(tiny):
    """Frozen at start (gc.freeze): a full collection no longer walks the model and its libraries' objects, which
    took 280 ms of every thread for MiniLM's server; given back to the collector when the lab stops."""
    gc.collect()
    with TestClient(create_app(tiny)) as client:
        assert client.get("/api/health").status_code == 200
        frozen = gc.get_freeze_count()
        assert frozen > 10_000
    assert gc.get_freeze_count() == 0


def test_a_damaged_store_file_stops_python_m_app_with_one_line(starts):
    folder, result = starts["damaged-store"]
    result = result.result()
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [store_refusal(folder)]


def test_a_damaged_store_file_stops_uvicorn_with_one_line_not_a_traceback(starts):
    folder, result = starts["damaged-store-uvicorn"]
    result = result.result()
    assert result.returncode != 0
    assert [line for line in result.stderr.splitlines() if "attention-lab" in line] == [
        f"ERROR:    {store_refusal(folder)}"
    ]
    assert "Traceback" not in result.stderr


def test_python_m_app_with_workers_checks_the_model_folder_before_starting_them(starts):
    missing, result = starts["missing-with-workers"]
    result = result.result()
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [f"attention-lab: model folder {missing} does not exist"]


@pytest.mark.parametrize("kind", ["missing", "broken-with-workers"])
def test_a_bad_cross_encoder_folder_stops_python_m_app_with_one_line_before_the_server_starts(starts, kind):
    """As a bad model folder: said in one line before uvicorn's start-up lines, whatever the workers (1 and 2: the
    starts' --workers in STARTS)."""
    folder, result = starts[f"cross-encoder-{kind}"]
    result = result.result()
    assert result.returncode != 0
    lines = result.output.strip().splitlines()
    says = str(folder) if kind.startswith("broken") else f"cross-encoder folder {folder} does not exist"
    assert len(lines) == 1 and lines[0].startswith("attention-lab: ") and says in lines[0], result.output
