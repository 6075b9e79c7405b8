"""Models named by their Hub id, org/name or org/name@revision, found in a Hugging Face cache laid out here by
hand as `hf download` leaves it (blobs, refs/<revision>, snapshots/<commit>/ of links into blobs): the lab
starts by id without a network, names the model by its id, and a model that is not there stops it with one
line giving the `hf download` command."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.engine.model import ModelLoadError, locate
from tests.conftest import LabProcess
from tests.families import build

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def cached(hub: Path, repo: str, folder: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """The folder's files as the cache holds a download of `repo` at `commit`: each file once in blobs/ under
    the hash of its content, the snapshot a tree of relative links into blobs/, and each ref naming the commit."""
    model = hub / f"models--{repo.replace('/', '--')}"
    (model / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = model / "snapshots" / commit
    for file in sorted(path for path in folder.rglob("*") if path.is_file()):
        content = file.read_bytes()
        blob = model / "blobs" / hashlib.sha256(content).hexdigest()
        blob.write_bytes(content)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (model / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (model / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A cache holding org/tiny-bert (main) and org/tiny-gpt2 at two commits: main, and v1 (a tag)."""
    root = tmp_path_factory.mktemp("hf")
    hub = root / "hub"
    cached(hub, "org/tiny-bert", build("bert", root / "bert"), COMMIT)
    cached(hub, "org/tiny-gpt2", build("gpt2", root / "gpt2"), COMMIT)
    cached(hub, "org/tiny-gpt2", build("llama", root / "llama"), OTHER_COMMIT, refs=("v1",))
    return hub


def test_an_id_is_the_snapshot_its_ref_names(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    name, path = locate("org/tiny-bert")
    assert (name, path) == ("org/tiny-bert", hub / "models--org--tiny-bert" / "snapshots" / COMMIT)
    assert (path / "config.json").is_symlink() and (path / "config.json").resolve().parent.name == "blobs"
    assert locate("org/tiny-gpt2@v1")[1].name == OTHER_COMMIT  # a tag's ref
    assert locate(f"org/tiny-gpt2@{COMMIT}")[1].name == COMMIT  # a commit itself
    # HF_HOME/hub when HF_HUB_CACHE is not set, as huggingface_hub reads it
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(hub.parent))
    assert locate("org/tiny-bert")[1].name == COMMIT


def test_a_folder_keeps_being_a_folder(tmp_path, monkeypatch):
    """A path that exists is a folder, even where it reads like an id."""
    monkeypatch.chdir(tmp_path)
    build("bert", tmp_path / "org" / "bert")
    assert locate("org/bert") == ("bert", Path("org/bert"))


@pytest.mark.parametrize(
    ("reference", "command"),
    [("org/missing", "hf download org/missing"), ("org/tiny-bert@v2", "hf download org/tiny-bert --revision v2")],
)
def test_a_model_not_in_the_cache_stops_the_lab_with_the_download_command(hub, monkeypatch, reference, command):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    with pytest.raises(ModelLoadError) as refused:
        locate(reference)
    assert "\n" not in str(refused.value) and f"`{command}`" in str(refused.value) and str(hub) in str(refused.value)


def test_python_m_app_stops_in_one_line_for_a_missing_id(hub):
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "ATTENTION_LAB_MODEL_PATH": "org/missing"}
    result = subprocess.run([sys.executable, "-m", "app"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("attention-lab: model org/missing is not in the Hugging Face cache")
    assert line.endswith("run `hf download org/missing` once, then start the lab again")


def test_the_lab_starts_by_id_and_names_its_models_by_id(hub, tmp_path):
    """No network: HF_HUB_OFFLINE, and a Hub endpoint nothing answers on."""
    env = {
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "ATTENTION_LAB_MODEL_PATH": "org/tiny-bert",
        "ATTENTION_LAB_MODELS": "org/tiny-gpt2,org/tiny-gpt2@v1",
    }
    lab = LabProcess(tmp_path, env=env)
    lab.start()
    try:
        listed = httpx.get(f"{lab.url}/api/models").json()
        assert [model["name"] for model in listed["models"]] == ["org/tiny-bert", "org/tiny-gpt2", "org/tiny-gpt2@v1"]
        assert httpx.get(f"{lab.url}/api/model").json()["name"] == "org/tiny-bert"
        families = {
            name: httpx.get(f"{lab.url}/api/model", params={"name": name}, timeout=60).json()["family"]
            for name in ("org/tiny-gpt2", "org/tiny-gpt2@v1")
        }
        assert families == {"org/tiny-gpt2": "GPT-2", "org/tiny-gpt2@v1": "Llama"}
        run = httpx.post(f"{lab.url}/api/analyze", json={"text": "The cat sat.", "model": "org/tiny-gpt2@v1"}).json()
        assert run["model"]["name"] == "org/tiny-gpt2@v1" and run["mask"] == "causal"
        page = httpx.get(f"{lab.url}/", params={"model": "org/tiny-gpt2@v1"}).text
        assert '<option value="org/tiny-gpt2@v1" selected>org/tiny-gpt2@v1</option>' in page
    finally:
        lab.stop()
