"""Every setting of the lab, read from ATTENTION_LAB_* environment variables and nowhere else. Each number
has its valid range here; a value outside it, or one that is not a number, stops the lab at start-up with
one line naming the setting and the range."""

from functools import lru_cache
from pathlib import Path
from typing import Annotated

import annotated_types
from pydantic import Field, IPvAnyNetwork, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.engine.choices import Placement, checked_device, checked_dtype, split_choice

ENV_PREFIX = "ATTENTION_LAB_"
KIB = 1024
GIB = 1024**3


def between(low, high):
    return Field(ge=low, le=high)


class SettingsError(ValueError):
    """A setting has a value the lab cannot run with."""


class Settings(BaseSettings):
    # An empty variable means "not set": ATTENTION_LAB_MODEL_PATH= is the packaged model, not ".".
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True)

    # A local model folder, or a Hub id (org/name, org/name@revision) found in the local Hugging Face cache
    # (app.engine.hub; nothing is downloaded); unset means the packaged MiniLM.
    model_path: str | None = None
    # A cross-encoder folder (a sequence-classification head with one label, as sentence-transformers'
    # CrossEncoder saves it): the search lesson re-ranks the top k by its relevance. Unset: none.
    cross_encoder: Path | None = None
    # More models (folders or Hub ids) the page offers in its model picker, separated by commas; each is read
    # once at start for its shape, then loaded when a run first needs it, and at most max_loaded_models stay
    # loaded at once (the default one always). Each may choose its own dtype and device after a `?`:
    # `org/name?dtype=bfloat16&device=cuda:1` (app.engine.choices).
    models: Annotated[list[str], NoDecode] = []
    max_loaded_models: Annotated[int, between(1, 64)] = 3
    # What every model's weights and passes are in, and where they run (app.engine.choices): auto, float32,
    # bfloat16 or float16; auto, cpu, cuda, cuda:N or mps. auto: the checkpoint's own dtype on a GPU, float32
    # on the CPU unless that would not fit max_store_bytes (then bfloat16); the first GPU, else the CPU.
    dtype: str = "auto"
    device: str = "auto"
    # The memory of a GPU for the work its passes do there, apart from the host's max_store_bytes: each pass,
    # measure and ablation on a model on that device takes its stated peak from both. 0: the device's free
    # memory once its first model is loaded, less an eighth for the allocator's own (app.engine.placement).
    max_device_bytes: Annotated[int, between(0, 1024 * GIB)] = 0
    # Runs each worker keeps in memory for the per-head and per-layer endpoints: the cache evicts the
    # least recently used run once either bound is passed (and recomputes it from its spec if asked again).
    max_runs: Annotated[int, between(1, 100_000)] = 64
    max_store_bytes: Annotated[int, between(64 * 1024**2, 1024 * GIB)] = 2 * GIB
    # Memory each server process takes at start and keeps for its runs, up to max_store_bytes, so that runs
    # reuse pages the system has already handed over (app.serving.memory.reserve); 0: take it as runs need it.
    reserve_bytes: Annotated[int, between(0, 1024 * GIB)] = 1 * GIB
    # Where run specs are shared between workers, replicas and restarts: "sqlite" (a file in data_dir,
    # nothing to install; the workers of one machine) or a Redis URL, redis://host:port/db (many machines).
    store: str = "sqlite"
    data_dir: Path = Path("data")
    # Specs kept: at most this many, none analyzed longer ago than this; the oldest go first.
    max_specs: Annotated[int, between(1, 100_000_000)] = 100_000
    max_spec_age_days: Annotated[float, between(0.01, 36_500)] = 30.0
    # Corpora (the text of a search index or an atlas) are named without being computed: the store keeps at most
    # max_corpus_bytes of them, apart from the runs' specs, letting the ones named longest ago go first (their ids
    # then answer 404: name the corpus again); no corpus ever pushes a run's spec out. One address names at most
    # corpus_bytes_per_hour of new corpora an hour, in each process (429 past it).
    max_corpus_bytes: Annotated[int, between(1024**2, 1024 * GIB)] = 1 * GIB
    corpus_bytes_per_hour: Annotated[int, between(64 * KIB, 1024 * GIB)] = 32 * 1024**2
    # How long a request waits for the store (a Redis socket, another worker's SQLite write) before 503.
    store_timeout_seconds: Annotated[float, between(0.05, 60)] = 2.0
    # Forward passes run at once (each uses every core torch is given), and requests that may wait for
    # one, in turn by client; past that, or after max_wait_seconds, the API answers 503 with Retry-After.
    # One client (an address, and a browser's cookie within it) past max_waiting_per_client gets 429, and so
    # does an address past max_waiting_per_address, whatever cookies its requests carry.
    max_concurrent_passes: Annotated[int, between(1, 64)] = 1
    max_waiting: Annotated[int, between(0, 10_000)] = 64
    max_waiting_per_client: Annotated[int, between(1, 1_000)] = 4
    max_waiting_per_address: Annotated[int, between(1, 10_000)] = 48
    max_wait_seconds: Annotated[float, between(0.1, 600)] = 30.0
    # Integrated Gradients costs about its steps times the tokens it reads (each step is a forward and a
    # backward pass): past this product a request answers 422 (256 steps at 256 tokens is 65,536).
    max_attribution_step_tokens: Annotated[int, between(64, 10_000_000)] = 65_536
    # Activation patching runs A once per cell, beside A and B, in padded passes of the lab's batch size:
    # about (cells + 2) × the longer input's tokens. Past this product a request answers 422 (MiniLM's
    # 6 blocks × 12 heads at 64 tokens is 4,736; every block × position of a 128-token input is 98,560).
    # The faithfulness scoreboard runs A once per head and key: (heads × keys + 1) × tokens, the same bound.
    max_patch_tokens: Annotated[int, between(64, 10_000_000)] = 131_072
    # The head atlas's ablation effect switches each head off in turn on its first sentences, from the head's
    # block on: its passes read the sample's tokens × heads × blocks (MiniLM's 12 × 6: 72 a token). Past this
    # product a corpus run answers 422 (262,144 is about 240 sentences of 15 tokens in MiniLM).
    max_ablation_tokens: Annotated[int, between(64, 100_000_000)] = 262_144
    # New tokens a writing may ask for (POST /api/generate's max_new_tokens; 422 past it): each is one pass of the
    # whole model, and the cache of keys and values and the attention rows a writing keeps grow with them.
    max_new_tokens: Annotated[int, between(1, 4096)] = 256
    # A model grown in the lab (app.engine.training; one training at a time per lab): its weights, its steps, a
    # step's tokens (batch × length), what a step costs (weights × those tokens: 2^31 is about 0.4 s a step on
    # one core, 25× the induction recipe's), and a teacher's text in bytes (its BPE is learnt outside the gate,
    # in about 0.6 s for 200 kB); past any, 422 naming it.
    max_train_weights: Annotated[int, between(1_000, 100_000_000)] = 1_000_000
    max_train_steps: Annotated[int, between(1, 10_000_000)] = 20_000
    max_train_batch_tokens: Annotated[int, between(64, 10_000_000)] = 16_384
    max_train_weight_tokens: Annotated[int, between(1_000_000, 10**15)] = 2**31
    max_train_text_bytes: Annotated[int, between(1_000, 100_000_000)] = 200_000
    # Models one address may have loaded (a model let go, asked for again) in an hour; 429 past it.
    model_loads_per_hour: Annotated[int, between(1, 10_000)] = 20
    # A request that gets its turn computes the runs waiting behind it (fair order, same model) in the same
    # padded passes, up to this many: a class pressing Enter at once costs a few passes, not one each. 1: off.
    max_batch_runs: Annotated[int, between(1, 1_000)] = 64
    # Longer texts answer 413: enough for 8,192 tokens of English (about 4.5 characters a token in a decoder's
    # BPE); the tokenizer cuts a text at max_tokens anyway.
    max_chars: Annotated[int, between(1, 1_000_000)] = 40_000
    # The most tokens a run reads, below the model's own positions (a longer input is cut, and says so). A run
    # keeps what is linear in its tokens (docs/capture.md's bytes per run), and its views compute attention a window
    # of rows at a time (app.engine.cells), so the bound follows memory, not tokens²: a decoder reads up to its
    # positions or this, whichever is less; MiniLM its 512.
    max_tokens: Annotated[int, between(8, 100_000)] = 8192
    # Request bodies past this answer 413 before they are read whole (40,000 characters escaped as
    # JSON \uXXXX pairs need 480 kB).
    max_body_bytes: Annotated[int, between(1 * KIB, 64 * 1024**2)] = 512 * KIB
    # A client must take each 1 MiB piece of an answer within this, or it is dropped.
    slow_reader_seconds: Annotated[float, between(1, 600)] = 30.0
    # HTTP limits of the lab's server (app.serving.server): the request line and headers together (431 past
    # it), the time to send a whole request (408 past it), idle keep-alive; open connections per process (503
    # past it) and per client address (429 past it); and connections kept for ordinary requests, which
    # event streams and connections that have sent no whole request (half-open, idle) can never take.
    max_header_bytes: Annotated[int, between(4 * KIB, 1024 * KIB)] = 64 * KIB
    request_timeout_seconds: Annotated[float, between(1, 600)] = 20.0
    keep_alive_seconds: Annotated[float, between(1, 600)] = 5.0
    max_connections: Annotated[int, between(16, 1_000_000)] = 4096
    max_connections_per_client: Annotated[int, between(1, 1_000_000)] = 1000
    connections_kept_for_requests: Annotated[int, between(8, 1_000_000)] = 512
    # Proxies whose X-Forwarded-For names the client (addresses or networks, separated by commas): only
    # a request from one of these is taken to come from the address it forwards. None by default.
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = []
    # A stopping server waits this long for requests under way (a class's event streams never end by
    # themselves), then closes them.
    shutdown_grace_seconds: Annotated[float, between(0, 600)] = 5.0
    # Live classes (app.classroom): how long one lasts, how many run at once, learners per class, and the
    # teacher's actions per second. They live in this process, or in Redis when ATTENTION_LAB_STORE is one.
    class_hours: Annotated[float, between(0.1, 72)] = 4.0
    max_classes: Annotated[int, between(1, 10_000)] = 100
    max_learners_per_class: Annotated[int, between(1, 5_000)] = 500
    class_actions_per_second: Annotated[float, between(1, 1_000)] = 20.0
    # A class ends when its teacher has had no page of it open (and made no move) for this long.
    class_teacher_away_seconds: Annotated[float, between(2, 86_400)] = 600.0
    # Per client, so that one device cannot take the class mode from the others (app.classroom.classes): an
    # address runs at most max_classes_per_client classes at once and starts at most class_starts_per_hour
    # an hour; it adds at most class_joins_per_minute new learners a minute (a class behind one NAT joins
    # from one address; a browser that joins again gets its learner back); a learner acts (votes, follows)
    # at most learner_actions_per_second. A browser (its lab_client cookie) holds at most
    # class_streams_per_browser event streams and an address class_streams_per_address, in each process.
    max_classes_per_client: Annotated[int, between(1, 1_000)] = 3
    class_starts_per_hour: Annotated[int, between(1, 10_000)] = 12
    class_joins_per_minute: Annotated[int, between(1, 100_000)] = 60
    learner_actions_per_second: Annotated[float, between(1, 1_000)] = 5.0
    class_streams_per_browser: Annotated[int, between(1, 1_000)] = 6
    class_streams_per_address: Annotated[int, between(1, 100_000)] = 600
    host: str = "127.0.0.1"
    port: Annotated[int, between(1, 65_535)] = 8000
    # Server processes `python -m app` starts; each loads its own copy of the model (about 0.5 GB).
    workers: Annotated[int, between(1, 64)] = 1

    @property
    def placement(self) -> Placement:
        """What a model is read in where it does not choose (app.engine.choices): its weights alone may take
        at most max_store_bytes of the host's memory."""
        return Placement(self.dtype, self.device, self.max_store_bytes)

    @field_validator("models", "trusted_proxies", mode="before")
    @classmethod
    def comma_separated(cls, value):
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def models_choose_what_they_may(cls, value):
        for reference in value:
            split_choice(reference)
        return value

    @field_validator("model_path")
    @classmethod
    def model_chooses_what_it_may(cls, value):
        if value is not None:
            split_choice(value)
        return value

    @field_validator("dtype")
    @classmethod
    def known_dtype(cls, value):
        return checked_dtype(value)

    @field_validator("device")
    @classmethod
    def known_device(cls, value):
        return checked_device(value)


def explain(error: ValidationError) -> str:
    """pydantic's errors as one line: each bad variable, what it was given and the valid range."""
    problems = []
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else ""
        field = Settings.model_fields.get(name)
        bounds = {type(rule).__name__: rule for rule in (field.metadata if field else [])}
        valid = (
            f"valid: {bounds['Ge'].ge:,} to {bounds['Le'].le:,}"
            if isinstance(bounds.get("Ge"), annotated_types.Ge) and "Le" in bounds
            else item["msg"].removeprefix("Value error, ")
        )
        problems.append(f"{ENV_PREFIX}{name.upper()}={item.get('input')!s}: {valid}")
    return "bad setting " + "; ".join(problems)


def check(settings: Settings) -> Settings:
    """The bounds that depend on one another."""
    if settings.connections_kept_for_requests >= settings.max_connections:
        raise SettingsError(
            f"bad setting {ENV_PREFIX}CONNECTIONS_KEPT_FOR_REQUESTS={settings.connections_kept_for_requests}: "
            f"valid: less than {ENV_PREFIX}MAX_CONNECTIONS ({settings.max_connections:,})"
        )
    return settings


@lru_cache
def get_settings() -> Settings:
    try:
        return check(Settings())
    except ValidationError as error:
        raise SettingsError(explain(error)) from None
