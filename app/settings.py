"""Every setting of the lab, read from ATTENTION_LAB_* environment variables and nowhere else."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTENTION_LAB_")

    # A local BERT-family folder (config.json, tokenizer, weights); empty means the packaged MiniLM.
    model_path: Path | None = None
    # Runs kept for the per-head and per-layer endpoints: the store evicts the least recently used run
    # once either bound is passed.
    max_runs: int = 64
    max_store_bytes: int = 2 * 1024**3
    # Longer texts answer 413; the tokenizer truncates to the model's 512 positions anyway.
    max_chars: int = 20_000
    host: str = "127.0.0.1"
    port: int = 8000


@lru_cache
def get_settings() -> Settings:
    return Settings()
