"""Start-up: the model folder setting, and a clear one-line failure for a bad folder."""

import gc
import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from app.engine.model import ModelLoadError, load_model
from app.main import create_app
from app.settings import get_settings
from tests.conftest import LAB_PROTOCOL, free_port, run_app


def test_missing_folder_fails_with_one_line_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    result = run_app([], {"ATTENTION_LAB_MODEL_PATH": str(missing)})
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [f"attention-lab: model folder {missing} does not exist"]


def test_broken_folder_fails_with_one_line_naming_it(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    result = run_app([], {"ATTENTION_LAB_MODEL_PATH": str(tmp_path)})
    assert result.returncode != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "Traceback" not in result.output


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


def damaged_store(folder):
    (folder / "runs.sqlite3").write_text("not a database " * 100)
    return (
        f"attention-lab: the run store (sqlite {folder / 'runs.sqlite3'}) could not be opened: file is not a database"
    )


def test_a_damaged_store_file_stops_python_m_app_with_one_line(tmp_path):
    expected = damaged_store(tmp_path)
    result = run_app([], {"ATTENTION_LAB_DATA_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [expected]


def test_a_damaged_store_file_stops_uvicorn_with_one_line_not_a_traceback(tmp_path):
    expected = damaged_store(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--http", LAB_PROTOCOL, "--port", str(free_port())],
        env={**os.environ, "ATTENTION_LAB_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert [line for line in result.stderr.splitlines() if "attention-lab" in line] == [f"ERROR:    {expected}"]
    assert "Traceback" not in result.stderr


def test_python_m_app_with_workers_checks_the_model_folder_before_starting_them(tmp_path):
    missing = tmp_path / "no-such-model"
    result = run_app(["--workers", "2", "--port", str(free_port())], {"ATTENTION_LAB_MODEL_PATH": str(missing)})
    assert result.returncode != 0
    assert result.output.strip().splitlines() == [f"attention-lab: model folder {missing} does not exist"]


@pytest.mark.parametrize("broken, workers", [(False, 1), (True, 2)], ids=["missing", "broken-with-workers"])
def test_a_bad_cross_encoder_folder_stops_python_m_app_with_one_line_before_the_server_starts(
    tmp_path, broken, workers
):
    """As a bad model folder: said in one line before uvicorn's start-up lines, whatever the workers."""
    folder = tmp_path / ("broken" if broken else "no-such-cross-encoder")
    if broken:
        folder.mkdir()
        (folder / "config.json").write_text("{ not json")
    args = ["--workers", str(workers), "--port", str(free_port())]
    result = run_app(args, {"ATTENTION_LAB_CROSS_ENCODER": str(folder)})
    assert result.returncode != 0
    lines = result.output.strip().splitlines()
    says = str(folder) if broken else f"cross-encoder folder {folder} does not exist"
    assert len(lines) == 1 and lines[0].startswith("attention-lab: ") and says in lines[0], result.output
