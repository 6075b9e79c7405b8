"""A model in the dtype and on the device it was chosen for (app.engine.placement): the settings that choose
them, checkpoints saved in bfloat16 and sharded, and the lab's numbers against transformers' own eager pass in
the same dtype."""

import os

import pytest

from app.engine.placement import PlacementError, split_choice
from app.settings import SettingsError, get_settings


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("org/name", ("org/name", {})),
        ("org/name@v1?dtype=bfloat16", ("org/name@v1", {"dtype": "bfloat16"})),
        ("/models/llama?device=cuda:1&dtype=float16", ("/models/llama", {"device": "cuda:1", "dtype": "float16"})),
    ],
)
def test_a_model_reference_may_choose_its_dtype_and_device(reference, expected):
    assert split_choice(reference) == expected


@pytest.mark.parametrize("reference", ["a?dtype=int8", "a?device=gpu", "a?colour=red", "a?dtype"])
def test_a_model_reference_choosing_what_it_may_not_is_refused(reference):
    with pytest.raises(PlacementError):
        split_choice(reference)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("DTYPE", "float64", "ATTENTION_LAB_DTYPE=float64: dtype 'float64': valid: auto, float32, bfloat16, float16"),
        ("DEVICE", "gpu", "ATTENTION_LAB_DEVICE=gpu: device 'gpu': valid: auto, cpu, cuda, cuda:N, mps"),
        (
            "MODELS",
            "a,b?dtype=int8",
            "ATTENTION_LAB_MODELS=a,b?dtype=int8: dtype 'int8': valid: auto, float32, bfloat16, float16",
        ),
        (
            "MODEL_PATH",
            "a?device=tpu",
            "ATTENTION_LAB_MODEL_PATH=a?device=tpu: device 'tpu': valid: auto, cpu, cuda, cuda:N, mps",
        ),
    ],
)
def test_a_bad_dtype_or_device_stops_the_lab_in_one_line(monkeypatch, name, value, expected):
    monkeypatch.setitem(os.environ, f"ATTENTION_LAB_{name}", value)
    get_settings.cache_clear()
    try:
        with pytest.raises(SettingsError) as error:
            get_settings()
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert str(error.value) == f"bad setting {expected}"


def test_dtype_and_device_are_auto_by_default():
    settings = get_settings()
    assert (settings.dtype, settings.device) == ("auto", "auto")
