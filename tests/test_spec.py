"""Run ids: the hash of the run's spec, the same for the same request in any process, and different for
anything that changes the numbers."""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from app.engine.errors import InvalidInput, TextTooLong
from app.engine.model import load_model
from app.engine.spec import RUN_ID, RunSpec

RIVER = RunSpec(
    model="sentence-transformers/all-MiniLM-L6-v2",
    model_digest="0" * 64,
    text="the river bank",
    text_pair="it was steep",
    ablated=((2, 5),),
)


def test_the_id_is_128_bits_of_the_canonical_specs_sha256_in_base32():
    # Pinned: a change here would orphan every stored spec and every link to a run.
    assert RIVER.canonical() == (
        '{"ablated":[[2,5]],"mask":"bidirectional","model":"sentence-transformers/all-MiniLM-L6-v2",'
        f'"model_digest":"{"0" * 64}","pooling":"mean","text":"the river bank","text_pair":"it was steep"}}'
    )
    expected = base64.b32encode(hashlib.sha256(RIVER.canonical().encode()).digest()[:16]).decode()
    assert RIVER.run_id == expected.rstrip("=").lower() == "cbewetmbnlzy2clnsjbgbfq7s4"
    assert RUN_ID.fullmatch(RIVER.run_id)


def test_the_canonical_form_gives_back_the_spec():
    for spec in (RIVER, RunSpec("m", "d", '東京 🙂 "quoted" \\ back', mask="causal", pooling="cls")):
        again = RunSpec.from_canonical(spec.canonical())
        assert again == spec and again.run_id == spec.run_id and hash(again) == hash(spec)


def test_every_field_changes_the_id():
    changed = [
        replace(RIVER, **{name: value})
        for name, value in [
            ("model", "another/model"),
            ("model_digest", "1" * 64),
            ("text", "the river banks"),
            ("text_pair", None),
            ("mask", "causal"),
            ("pooling", "cls"),
            ("ablated", ((2, 6),)),
        ]
    ]
    assert len({spec.run_id for spec in [RIVER, *changed]}) == 8


def test_text_and_pair_are_not_one_string():
    assert RunSpec("m", "d", "a b", text_pair="c").run_id != RunSpec("m", "d", "a", text_pair="b c").run_id


def test_equivalent_requests_name_one_run(lab):
    mean = lab.spec("the river bank", pooling="mean")
    assert lab.spec("the river bank").run_id == mean.run_id  # the model's own pooling, resolved
    assert lab.spec("the river bank", pooling="cls").run_id != mean.run_id
    ablated = lab.spec("the river bank", ablate=[[4, 1], [4, 0], [4, 1]])
    assert ablated.ablated == ((4, 0), (4, 1))
    assert lab.spec("the river bank", ablate=[(4, 0), (4, 1)]).run_id == ablated.run_id
    assert lab.spec("the river bank", ablate=[]).run_id == mean.run_id


def test_a_spec_is_checked_before_it_is_made(lab):
    with pytest.raises(InvalidInput, match="no head"):
        lab.spec("ok", ablate=[(6, 0)])
    with pytest.raises(TextTooLong, match="20,001 characters"):
        lab.spec("a" * 10_000, text_pair="b" * 10_001)


def test_the_model_digest_is_the_models_not_its_folders(tiny, tiny_model_dir, minilm, tmp_path):
    moved = shutil.copytree(tiny_model_dir, tmp_path / "elsewhere" / tiny_model_dir.name)
    assert load_model(moved).digest == tiny.digest
    assert tiny.digest != minilm.digest and len(minilm.digest) == 64
    changed = shutil.copytree(tiny_model_dir, tmp_path / "eps" / tiny_model_dir.name)
    config = (changed / "config.json").read_text().replace('"layer_norm_eps": 1e-12', '"layer_norm_eps": 1e-06')
    (changed / "config.json").write_text(config)
    assert load_model(changed).digest != tiny.digest  # same weights, other numbers: another model


def test_another_process_names_the_same_run_the_same(tiny, tiny_model_dir):
    script = (
        "import sys; from app.engine.model import load_model; from app.engine.spec import RunSpec; "
        "model = load_model(sys.argv[1]); print(RunSpec(model.name, model.digest, 'the river bank').run_id)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tiny_model_dir)],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == RunSpec(tiny.name, tiny.digest, "the river bank").run_id
