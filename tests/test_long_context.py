"""A lab reading 8,192 tokens: the default bound lets a decoder read its positions, each run keeps what the
docs/capture.md's formula says, and a server holding 10 such runs, each analyzed with its first overview, stays
under the documented memory bound (the store's bound + 1.5 GiB). One lab process, a small Llama-style
decoder of 8,192 positions so that its passes take a fraction of a second."""

import httpx
import pytest

from tests.conftest import LabProcess
from tests.families import long_llama

STORE_BYTES = 1024**3
GIB = 1024**3
WORDS = "the cat sat on the mat a quick brown fox jumps over the lazy dog".split()


@pytest.fixture(scope="module")
def long_lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-8192")
    long_llama(folder, positions=8192, blocks=2, heads=4, hidden=64)
    lab = LabProcess(
        tmp_path_factory.mktemp("long-lab"),
        env={"ATTENTION_LAB_MODEL_PATH": str(folder), "ATTENTION_LAB_MAX_STORE_BYTES": str(STORE_BYTES)},
        fresh=True,  # its peak RSS is measured
    )
    lab.start()
    yield lab
    lab.stop()


def peak_resident_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmHWM"].split()[0]) * 1024


def test_ten_runs_of_8192_tokens_stay_under_the_memory_bound(long_lab):
    model = httpx.get(f"{long_lab.url}/api/model").json()
    assert model["max_input_tokens"] == 8192  # the default follows the model's positions, up to 8,192
    for take in range(10):
        # About 9,000 tokens of text (each word of the tokenizer's corpus is one token), cut at 8,192.
        text = f"take {take} " + " ".join(WORDS[(take + i) % len(WORDS)] for i in range(9000))
        assert len(text) <= 40_000
        answer = httpx.post(
            f"{long_lab.url}/api/analyze",
            json={"text": text, "attention": {"dtype": "float32", "layer": 0, "head": 0, "size": 512}},
            timeout=60,
        ).json()
        assert len(answer["tokens"]) == 8192 and answer["truncated"]
        assert answer["attention"]["shape"] == [1, 1, 512, 512] and answer["attention"]["pooling"] == "max"
    assert httpx.get(f"{long_lab.url}/api/health").json()["runs"] == 10
    assert peak_resident_bytes(long_lab.process.pid) < STORE_BYTES + 1.5 * GIB
