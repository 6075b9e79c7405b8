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
    # Forward passes run at once (each uses every core torch is given), and requests that may wait for
    # one; past that, or after max_wait_seconds, the API answers 503 with Retry-After.
    max_concurrent_passes: int = 1
    max_waiting: int = 64
    max_wait_seconds: float = 30.0
    # Longer texts answer 413; the tokenizer truncates to the model's 512 positions anyway.
    max_chars: int = 20_000
    # Request bodies past this answer 413 before they are read whole (20,000 characters escaped as
    # JSON \uXXXX pairs need 240 kB).
    max_body_bytes: int = 512 * 1024
    host: str = "127.0.0.1"
    port: int = 8000


@lru_cache
def get_settings() -> Settings:
    return Settings()
