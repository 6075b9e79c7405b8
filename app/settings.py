"""Every setting of the lab, read from ATTENTION_LAB_* environment variables and nowhere else."""

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTENTION_LAB_")

    # A local BERT-family folder (config.json, tokenizer, weights); empty means the packaged MiniLM.
    model_path: Path | None = None
    # Runs each worker keeps in memory for the per-head and per-layer endpoints: the cache evicts the
    # least recently used run once either bound is passed (and recomputes it from its spec if asked again).
    max_runs: int = 64
    max_store_bytes: int = 2 * 1024**3
    # Where run specs are shared between workers, replicas and restarts: "sqlite" (a file in data_dir,
    # nothing to install; the workers of one machine) or a Redis URL, redis://host:port/db (many machines).
    store: str = "sqlite"
    data_dir: Path = Path("data")
    # Specs kept: at most this many, none analyzed longer ago than this; the oldest go first.
    max_specs: int = 100_000
    max_spec_age_days: float = 30.0
    # How long a request waits for the store (a Redis socket, another worker's SQLite write) before 503.
    store_timeout_seconds: float = 2.0
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
    # Server processes `python -m app` starts; each loads its own copy of the model (about 0.5 GB).
    workers: int = 1


@lru_cache
def get_settings() -> Settings:
    return Settings()
