"""Writing (app.engine.writing) on tiny random decoders, checked against transformers itself: the tokens of
model.generate after torch.manual_seed, the funnel of transformers' own logits processors on a full pass's
logits, and each new attention row against the last row of a full pass over the sequence."""

import threading

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    OPTForCausalLM,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from app.engine.capture import eager_attention, fused_attention
from app.engine.engine import Engine
from app.engine.errors import InvalidInput, PassFailed
from app.engine.model import adopt, load_model
from app.engine.writing import MAX_NEW_TOKENS, CannotWrite, Knobs, Writing, check_writer, writing, writing_bytes
from tests.families import build
from tests.float32 import pass_tolerance

PROMPT = "The cat sat on the mat. The cat"
GREEDY = Knobs(max_new_tokens=6, do_sample=False)
SAMPLED = [
    Knobs(max_new_tokens=6, do_sample=True, temperature=1.5, top_k=0, top_p=1.0),
    Knobs(max_new_tokens=6, do_sample=True, temperature=0.2, top_k=0, top_p=0.8),
    Knobs(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=5, top_p=0.9),
    Knobs(max_new_tokens=6, do_sample=True, temperature=0.7, top_k=40, top_p=0.5),
]
SEEDS = [(0, 1), (2, 2024), (3, 4), (5, 2**40)]  # two for each of SAMPLED


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen3"])
def engine(request, tmp_path_factory) -> Engine:
    return Engine(load_model(build(request.param, tmp_path_factory.mktemp(request.param))), max_chars=1000)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Engine:
    """Block 0 attends within a window of 3 tokens: its cache keeps only the last of them."""
    return Engine(load_model(build("gemma3", tmp_path_factory.mktemp("gemma3"))), max_chars=1000)


def written(engine: Engine, knobs: Knobs, text: str = PROMPT) -> Writing:
    writer = writing(engine, text, knobs)
    for step in writer.slices():
        step()
    return writer


def generated(engine: Engine, writer: Writing) -> list[int]:
    """transformers' own tokens for the writing's prompt and knobs, after torch.manual_seed(seed)."""
    prompt = torch.tensor([[token.id for token in writer.prompt]])
    with torch.random.fork_rng():
        torch.manual_seed(writer.knobs.seed)
        out = engine.loaded.model.generate(prompt, **writer.knobs.generate_kwargs())
    return out[0, prompt.shape[1] :].tolist()


def test_greedy_writes_what_generate_writes(engine):
    writer = written(engine, GREEDY)
    # bit for bit: same shapes (the step's passes are generate's: the prompt, then one token, the same cache)
    assert writer.new_ids == generated(engine, writer)
    assert all(
        step.draw.how == "argmax" and [stage.name for stage in step.funnel] == ["softmax"] for step in writer.steps
    )
    # The knobs left out are the model's own: a tiny model's generation_config does not sample.
    default = written(engine, Knobs(max_new_tokens=GREEDY.max_new_tokens))
    assert default.settings["do_sample"] is False and default.new_ids == writer.new_ids


@pytest.mark.parametrize(
    ("knobs", "seeds"),
    list(zip(SAMPLED, SEEDS, strict=True)),
    ids=[f"t{knobs.temperature}-k{knobs.top_k}-p{knobs.top_p}" for knobs in SAMPLED],
)
def test_sampling_writes_what_generate_writes_after_manual_seed(engine, knobs, seeds):
    for seed in seeds:
        writer = written(engine, Knobs(**{**knobs.__dict__, "seed": seed}))
        assert writer.new_ids == generated(engine, writer), seed  # bit for bit: same shapes (generate's passes)
        assert all(step.draw.how == "race" for step in writer.steps)


def test_a_generator_seeded_draws_what_the_global_rng_draws_after_manual_seed():
    """What makes a generator per request exact: on the CPU, torch.manual_seed(seed) seeds the global generator
    as torch.Generator().manual_seed(seed) seeds a new one (the same Mersenne Twister state), so the two give
    the same multinomial draws, one after another."""
    probabilities = torch.softmax(torch.randn(20, 300, generator=torch.Generator().manual_seed(9)) * 3, dim=-1)
    for seed in [0, 1, 7, 2024, 2**63 + 5]:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            # bit for bit: no rounding (a generator's state is bytes)
            assert torch.equal(torch.random.get_rng_state(), torch.Generator().manual_seed(seed).get_state())
            drawn = [int(torch.multinomial(row[None], 1)) for row in probabilities]
        own = torch.Generator().manual_seed(seed)
        assert [int(torch.multinomial(row[None], 1, generator=own)) for row in probabilities] == drawn


def test_multinomial_draws_one_token_by_an_exponential_race():
    """What Draw says a sampled draw is: torch.multinomial's one-sample draw is the token with the largest
    p / w, w ~ Exp(1) drawn by the same generator for every token (the first to arrive at w / p)."""
    for seed in range(300):
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(1, 50, generator=generator) * (seed % 5)
        logits[0, seed % 7 :: 7] = float("-inf")  # tokens a processor removed: probability 0, never drawn
        probabilities = torch.softmax(logits, dim=-1)
        race = torch.Generator().set_state(generator.get_state())
        token = int(torch.multinomial(probabilities, 1, generator=generator))
        waits = torch.empty_like(probabilities).exponential_(1, generator=race)
        assert token == int((waits / probabilities).argmin()) and probabilities[0, token] > 0
        # the race takes from the generator what multinomial takes: the draws after it are multinomial's too
        assert torch.equal(race.get_state(), generator.get_state())  # bit for bit: no rounding (a generator's state)


def test_each_draw_is_shown_as_its_race(engine):
    writer = written(engine, SAMPLED[2])
    for step in writer.steps:
        draw = step.draw
        assert draw.ids[0] == step.token and draw.arrivals == sorted(draw.arrivals)
        for wait, probability, arrival in zip(draw.waits, draw.probabilities, draw.arrivals, strict=True):
            assert arrival == pytest.approx(wait / probability, rel=1e-6)


def test_a_writing_leaves_the_global_rng_alone(engine):
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    first = written(engine, SAMPLED[0]).new_ids
    assert torch.equal(torch.random.get_rng_state(), before)  # bit for bit: no rounding (a generator's state)
    torch.manual_seed(6)  # another global state changes nothing: the writing draws from its own generator
    assert written(engine, SAMPLED[0]).new_ids == first


def test_the_same_seed_and_knobs_write_the_same_tokens(engine):
    knobs = Knobs(max_new_tokens=6, do_sample=True, temperature=1.5, top_k=0, top_p=1.0, seed=11)
    assert written(engine, knobs).new_ids == written(engine, knobs).new_ids
    assert written(engine, knobs).new_ids != written(engine, Knobs(**{**knobs.__dict__, "seed": 12})).new_ids


def full_pass(engine: Engine, ids: list[int]):
    with torch.inference_mode():
        return engine.loaded.model(input_ids=torch.tensor([ids]), output_attentions=True)


@pytest.mark.parametrize("knobs", [SAMPLED[1], SAMPLED[3]], ids=["t0.2-p0.8", "t0.7-k40-p0.5"])
def test_the_funnel_is_the_logits_processors_own(engine, knobs):
    """Each stage's candidates are those of transformers' warpers, built here from the knobs in generate's order
    (temperature, top-k, top-p) and applied to the logits of a full pass over the sequence so far."""
    writer = written(engine, knobs)
    ids = writer.ids[0].tolist()
    # The stages' errors are the logits', divided by the temperature.
    within = pass_tolerance(engine.loaded.model.config) / min(1.0, knobs.temperature)
    warpers = [TemperatureLogitsWarper(knobs.temperature)]  # then top-k and top-p where on: generate's order
    warpers += [TopKLogitsWarper(knobs.top_k)] if knobs.top_k else []
    warpers += [TopPLogitsWarper(knobs.top_p)] if knobs.top_p < 1 else []
    names = {TemperatureLogitsWarper: "temperature", TopKLogitsWarper: "top_k", TopPLogitsWarper: "top_p"}
    for step in writer.steps:
        scores = full_pass(engine, ids[: step.position]).logits[0, -1][None].float()
        expected = [("softmax", scores)]
        for warper in warpers:
            scores = warper(torch.tensor([ids[: step.position]]), scores)
            expected.append((names[type(warper)], scores))
        assert [stage.name for stage in step.funnel] == [name for name, _ in expected]
        before = None
        for stage, (name, scores) in zip(step.funnel, expected, strict=True):
            probabilities = torch.softmax(scores, dim=-1)[0].double()
            assert stage.probabilities == pytest.approx(probabilities[stage.ids].tolist(), abs=within), name
            assert stage.probabilities[-1] == pytest.approx(float(probabilities.sort().values[-10]), abs=within)
            assert stage.kept == int((probabilities > 0).sum())
            mass = 1.0 if before is None else float(before[probabilities > 0].sum())
            assert stage.mass == pytest.approx(mass, abs=within)
            before = probabilities


def check_rows(engine: Engine) -> None:
    """The row of the token read last, from each cached step, against a full pass over the sequence up to it."""
    writer = written(engine, SAMPLED[0])
    ids, config = writer.ids[0].tolist(), engine.loaded.model.config
    for step in writer.steps:
        attentions = full_pass(engine, ids[: step.position]).attentions
        full = torch.stack([weights[0, :, -1] for weights in attentions])  # [layer, head, key]
        assert (
            step.attention.shape == full.shape == (config.num_hidden_layers, config.num_attention_heads, step.position)
        )
        assert torch.allclose(step.attention, full, rtol=0, atol=pass_tolerance(config))
        assert torch.allclose(step.attention.sum(-1), torch.ones(full.shape[:2]), atol=pass_tolerance(config))


def test_each_new_row_is_the_last_row_of_a_full_pass(engine):
    check_rows(engine)


def test_a_windowed_blocks_row_weighs_the_keys_before_its_window_0(gemma3):
    """Gemma 3's block 0 attends within a window of 3 tokens: its cache keeps the last 2, and its row over every
    token is the full pass's, 0 before the window."""
    check_rows(gemma3)
    check_cache(gemma3)


def check_cache(engine: Engine) -> None:
    """Each block keeps every token read before (a windowed block its last window - 1), [batch, key/value heads,
    token, head_dim] keys and as many values; and a writing's stated bytes cover what it holds."""
    writer = written(engine, GREEDY)
    config = engine.loaded.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    width = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    windows = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    for step in writer.steps:
        assert step.read == (len(writer.prompt) if step.index == 0 else 1)
        assert step.reused == (0 if step.index == 0 else step.position - 1)
        for block, kind in zip(step.cache, windows, strict=True):
            kept = step.position if kind == "full_attention" else config.sliding_window - 1
            assert block.shape == (1, heads, kept, width) and block.first == step.position - kept
            assert block.nbytes == 2 * kept * heads * width * 4
    assert writer.cache is None  # let go once the last token is written: the steps keep its description
    rows = sum(step.attention.numel() * 4 for step in writer.steps)
    assert writer.nbytes >= writer.steps[-1].cache_bytes + rows
    assert writing_bytes(engine, 10, 20) < writing_bytes(engine, 20, 20) < writing_bytes(engine, 20, 40)


def test_the_cache_is_described_as_it_is(engine):
    check_cache(engine)


def test_writing_stops_at_the_end_of_text(engine):
    """Stopped by any of generation_config's end-of-text ids (a list here), the id written last, as generate."""
    first = written(engine, GREEDY)
    end = first.new_ids[2]
    config = engine.loaded.model.generation_config
    saved = config.eos_token_id
    config.eos_token_id = [end, min(set(range(10)) - set(first.new_ids))]  # one it does not write, as a list
    try:
        writer = written(engine, GREEDY)
        assert writer.new_ids == generated(engine, writer) == first.new_ids[: first.new_ids.index(end) + 1]
    finally:
        config.eos_token_id = saved
    assert writer.steps[-1].stop == "eos" and [step.stop for step in writer.steps[:-1]] == [None] * (
        len(writer.steps) - 1
    )
    assert first.steps[-1].stop == "max_new_tokens" and len(first.steps) == GREEDY.max_new_tokens
    with pytest.raises(RuntimeError, match="ended"):
        writer.step()


def test_the_bounds_are_refused_naming_them(engine):
    with pytest.raises(InvalidInput, match=f"1 to {MAX_NEW_TOKENS} new tokens"):
        writing(engine, PROMPT, Knobs(max_new_tokens=MAX_NEW_TOKENS + 1))
    with pytest.raises(InvalidInput, match="1 to 5 new tokens"):
        writing(engine, PROMPT, Knobs(max_new_tokens=6), most=5)
    with pytest.raises(InvalidInput, match="max_new_tokens 60 make"):
        writing(engine, PROMPT, Knobs(max_new_tokens=60))  # the tiny models read 64 positions
    for knobs, word in [
        (Knobs(temperature=0.0), "temperature"),
        (Knobs(top_k=-1), "top_k"),
        (Knobs(top_p=1.5), "top_p"),
        (Knobs(seed=-1), "seed"),
        (Knobs(max_new_tokens=0), "max_new_tokens"),
    ]:
        with pytest.raises(InvalidInput, match=word):
            writing(engine, PROMPT, knobs)


def test_an_encoder_says_it_reads_and_does_not_write(minilm):
    with pytest.raises(CannotWrite) as refused:
        check_writer(minilm)  # what writing() and Writing() check first
    said = str(refused.value)
    assert "reads and does not write" in said and "an encoder" in said
    assert "ATTENTION_LAB_MODEL_PATH" in said and "ATTENTION_LAB_MODELS" in said


def test_a_step_waits_for_a_fused_pass_and_keeps_the_eager_attention(gemma3):
    """A model's attention is one setting for all its threads: a long pass elsewhere switches it to the fused
    one, which returns no weights. A writing's step waits for that pass to end, and no pass switches it under
    the step."""
    model, family = gemma3.loaded.model, gemma3.loaded.family
    inside, release, seen = threading.Event(), threading.Event(), []

    def long_pass():
        with fused_attention(model, family, 1, 4096):
            inside.set()
            release.wait(10)

    other = threading.Thread(target=long_pass)
    other.start()
    inside.wait(10)
    assert model.config._attn_implementation == "sdpa"

    def step():
        with eager_attention(model):
            seen.append(model.config._attn_implementation)

    stepping = threading.Thread(target=step)
    stepping.start()
    stepping.join(0.2)
    assert stepping.is_alive() and not seen  # waiting for the long pass
    release.set()
    other.join(10)
    stepping.join(10)
    assert seen == ["eager"] and model.config._attn_implementation == "eager"


def hooks(model: torch.nn.Module) -> int:
    return sum(len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules())


def test_a_writing_leaves_no_hooks_and_a_failed_step_ends_it(engine, monkeypatch):
    """Its hooks (each block's new row) are on the model for a step's pass only; a pass that raises is a
    PassFailed, and the writing, whose cache may hold part of that pass, takes no more steps."""
    before = hooks(engine.loaded.model)
    writer = writing(engine, PROMPT, GREEDY)
    writer.step()
    assert hooks(engine.loaded.model) == before
    monkeypatch.setattr(engine.loaded.model, "forward", lambda **_: 1 / 0)
    with pytest.raises(PassFailed, match="token 2"):
        writer.step()
    monkeypatch.undo()
    assert hooks(engine.loaded.model) == before
    with pytest.raises(RuntimeError, match="failed"):
        writer.step()


def test_a_decoder_without_an_adapter_writes_too(tmp_path):
    """A causal LM of a family the lab has no adapter for (OPT), adopted with its head as a notebook holds it:
    it writes what generate writes, its rows taken from output_attentions."""
    folder = build("opt", tmp_path / "opt")
    torch.manual_seed(0)
    loaded = adopt(OPTForCausalLM(AutoConfig.from_pretrained(folder)), AutoTokenizer.from_pretrained(folder))
    assert loaded.family.attention_only and loaded.has_lm_head
    engine = Engine(loaded, max_chars=1000)
    writer = written(engine, SAMPLED[0])
    assert writer.new_ids == generated(engine, writer)
    step = writer.steps[-1]
    attentions = full_pass(engine, writer.ids[0, : step.position].tolist()).attentions
    full = torch.stack([weights[0, :, -1] for weights in attentions])
    assert torch.allclose(step.attention, full, rtol=0, atol=pass_tolerance(loaded.model.config))
