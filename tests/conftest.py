import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import BertConfig, BertModel

from app.gate import PassGate
from app.lab import Lab
from app.main import create_app
from app.model import load_model, packaged_model_path

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="session")
def minilm():
    """The real packaged all-MiniLM-L6-v2."""
    return load_model()


@pytest.fixture(scope="session")
def lab(minilm):
    return Lab(minilm, max_chars=20_000, max_runs=64, max_store_bytes=2 * 1024**3, gate=PassGate(1, 64, 30))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random 2-block BERT with MiniLM's tokenizer: fast, and a different shape from MiniLM's."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(packaged_model_path() / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="session")
def client(minilm):
    with TestClient(create_app(minilm)) as test_client:
        yield test_client
