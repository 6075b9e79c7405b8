"""A model grown in the lab (app.engine.training), without a server: its spec's id, its checkpoints as transformers
folders, its head scores against NumPy from transformers' own attention, the induction recipe's head on periods
and offsets it never trained on, and the same weights from the same spec, whether run twice or paused and resumed.

The recipe is grown once for the session, up to its first checkpoint with an induction head (its step budget is
600 steps; the head forms at about step 275): tests/grown.py. What needs a second training (the same weights again,
a pause) grows the recipe's first 25 steps, not the whole of it."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.engine.threads import on_cores
from app.engine.training.data import Data, conditions, trained_offsets, trained_periods
from app.engine.training.spec import TrainingSpec
from app.engine.training.trainer import Trainer
from tests.float32 import pass_tolerance
from tests.grown import saved_and_read

ROUNDED = 5e-5  # the lab's scores are JSON with 4 decimals
RECIPE = TrainingSpec()


def load(folder: Path):
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def weights_of(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.fixture(scope="module", autouse=True)
def one_core():
    """The checks' passes of a grown model on one core, as the trainer's (app.engine.training.trainer.CORES): its
    operations are too small to share out, and a second core's wake-ups cost more than it does."""
    with on_cores(1):
        yield


@pytest.fixture(scope="module")
def grown(grown_recipe):
    """The recipe grown until a checkpoint has an induction head: the trainer, and each checkpoint's weights as
    the trainer held them when it kept the checkpoint."""
    return grown_recipe.trainer, {step: grown_recipe.weights(step) for step in grown_recipe.states}


def test_a_specs_id_is_the_hash_of_everything_that_changes_its_weights():
    assert TrainingSpec().train_id == TrainingSpec.of().train_id == "nbbd5anddwmvry6naxtxhy3glq"  # pinned
    assert TrainingSpec.of(seed=0, lr=3e-3).train_id == RECIPE.train_id  # the defaults given are the defaults
    assert TrainingSpec.of(seed=1).train_id != RECIPE.train_id
    assert TrainingSpec.from_canonical(TrainingSpec.of(steps=60).canonical()) == TrainingSpec.of(steps=60)
    corpus = TrainingSpec.of(data="corpus")
    assert (corpus.tokenizer, corpus.vocab) == ("bpe", 512)  # the corpus is read by a BPE unless said otherwise


def test_the_recipe_never_trains_on_its_held_out_periods_and_offsets():
    held_out = [(c.period, c.offset) for c in conditions(RECIPE)]
    assert held_out == [(13, 5), (19, 7), (27, 3)]
    assert not {13, 19, 27} & set(trained_periods(RECIPE)) and max(trained_periods(RECIPE)) == 24
    assert not {3, 5, 7} & set(trained_offsets(RECIPE))


def test_every_checkpoint_reloads_in_transformers_bit_for_bit_with_its_tokenizer_and_card(grown):
    trainer, kept = grown
    assert [c["step"] for c in trainer.checkpoints] == sorted(kept)
    for checkpoint in trainer.checkpoints:
        folder = trainer.models_dir / checkpoint["model"]
        model = load(folder)
        reloaded = model.state_dict()
        assert reloaded.keys() == kept[checkpoint["step"]].keys()
        for name, tensor in kept[checkpoint["step"]].items():
            assert torch.equal(reloaded[name], tensor), name  # bit for bit: read back
        assert checkpoint["bytes"] == sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    last = trainer.models_dir / trainer.checkpoints[-1]["model"]
    tokenizer = AutoTokenizer.from_pretrained(last)
    assert tokenizer.decode(tokenizer("ba be bi")["input_ids"]) == "ba be bi"
    card = (last / "README.md").read_text()
    assert f"training {RECIPE.train_id}" in card and f"step {trainer.step} of 600" in card
    assert json.loads(card.split("```json\n")[1].split("\n```")[0]) == json.loads(RECIPE.canonical())["training"]
    on_disk = load_file(last / "model.safetensors")
    assert on_disk.keys() <= kept[trainer.step].keys()  # what transformers saved is what it loaded


def numpy_scores(model, tokens: np.ndarray, period: int, offset: int) -> dict:
    """The scores of one condition from transformers' attention and logits, in NumPy (REPORT.md's definitions)."""
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(tokens), output_attentions=True)
    att = np.stack([a.numpy().astype(np.float64) for a in out.attentions], axis=1)  # [seq, layer, head, q, k]
    i = np.arange(1, tokens.shape[1])
    q = np.arange(offset + period, offset + 2 * period)
    logits = out.logits.numpy().astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))

    def loss(targets):
        return float(-np.mean([logp[s, t - 1, tokens[s, t]] for s in range(len(tokens)) for t in targets]))

    return {
        "previous": att[..., i, i - 1].mean(-1).mean(0),  # [layer, head]
        "prefix": att[..., q, q - period + 1].mean(-1).mean(0),
        "first": loss(range(offset + 1, offset + period)),
        "second": loss(range(offset + period + 1, offset + 2 * period)),
    }


def numpy_copying(model) -> tuple[np.ndarray, np.ndarray]:
    """Olsson et al.'s copying score of every head from the raw weights: the eigenvalues of the full V × V OV
    circuit N(W_E) W_V W_O diag(g) W_U, and the share of rows whose largest entry is their own token."""
    w = {name: t.numpy().astype(np.float64) for name, t in model.state_dict().items()}
    config = model.config
    heads, dh = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    embed = w["model.embed_tokens.weight"]
    unembed = (w["lm_head.weight"] * w["model.norm.weight"]).T  # [hidden, vocab]
    scores, own = np.zeros((config.num_hidden_layers, heads)), np.zeros((config.num_hidden_layers, heads))
    for layer in range(config.num_hidden_layers):
        gain = w[f"model.layers.{layer}.input_layernorm.weight"]
        normed = embed / np.sqrt((embed**2).mean(-1, keepdims=True) + config.rms_norm_eps) * gain
        v = w[f"model.layers.{layer}.self_attn.v_proj.weight"].T
        o = w[f"model.layers.{layer}.self_attn.o_proj.weight"].T
        for h in range(heads):
            part = slice(h * dh, (h + 1) * dh)
            circuit = normed @ v[:, part] @ o[part] @ unembed  # [vocab, vocab]
            eigenvalues = np.linalg.eigvals(circuit)
            scores[layer, h] = eigenvalues.real.sum() / np.abs(eigenvalues).sum()
            own[layer, h] = (circuit.argmax(-1) == np.arange(len(circuit))).mean()
    return scores, own


def test_every_head_score_is_numpys_from_the_checkpoints_own_attention(grown):
    """At step 0, on the plateau, during the drop and once the head has formed: the scores the lab reported
    equal NumPy's from the checkpoint folder's attention (transformers, eager, output_attentions)."""
    trainer, _ = grown
    data = Data(RECIPE)
    steps = [c["step"] for c in trainer.checkpoints]
    chosen = {steps[0], steps[len(steps) // 2], steps[-2], steps[-1]}
    for checkpoint in (c for c in trainer.checkpoints if c["step"] in chosen):
        model = load(trainer.models_dir / checkpoint["model"])
        lab = checkpoint["scores"]
        weight = pass_tolerance(model.config) + ROUNDED
        found = []
        for condition, reported in zip(conditions(RECIPE), lab["conditions"], strict=True):
            tokens = data.held_out(condition).numpy()  # the inputs the lab scored (what is compared is computed)
            mine = numpy_scores(model, tokens, condition.period, condition.offset)
            np.testing.assert_allclose(reported["prefix"], mine["prefix"], atol=weight)
            assert reported["in_context_loss"] == pytest.approx(mine["second"], abs=1e-3)
            assert reported["first_copy_loss"] == pytest.approx(mine["first"], abs=1e-3)
            found.append(mine)
        np.testing.assert_allclose(lab["previous"], np.mean([m["previous"] for m in found], 0), atol=weight)
        prefix_min = np.min([m["prefix"] for m in found], 0)
        np.testing.assert_allclose(lab["prefix_min"], prefix_min, atol=weight)
        assert lab["induction_head"] == list(np.unravel_index(prefix_min.argmax(), prefix_min.shape))
        copying, own = numpy_copying(model)
        np.testing.assert_allclose(lab["copying"], copying, atol=1e-6 + ROUNDED)
        np.testing.assert_allclose(lab["self_copy"], own, atol=ROUNDED)


def test_the_recipe_grows_an_induction_head_that_reads_content_it_never_trained_on(grown):
    """The first checkpoint the lab says has one, within the recipe's 600 steps: on fresh sequences of periods
    13, 19 and 27 after prefixes of 5, 7 and 3 tokens (never trained on; drawn here by NumPy), one head attends
    to the token after each token's earlier occurrence with weight >= 0.5 at every one, and the second copy's
    loss is below 1 nat at every one."""
    trainer, _ = grown
    assert trainer.checkpoints[-1]["scores"]["formed"] and trainer.step <= RECIPE.steps
    model = load(trainer.models_dir / trainer.checkpoints[-1]["model"])
    draw = np.random.default_rng(56)
    prefix, losses = [], []
    for period, offset in ((13, 5), (19, 7), (27, 3)):
        first = np.stack([draw.permutation(RECIPE.vocab)[: offset + period] for _ in range(32)])  # no [UNK]
        tokens = np.concatenate([first, first[:, offset:]], axis=1)
        scores = numpy_scores(model, tokens, period, offset)
        prefix.append(scores["prefix"])
        losses.append(scores["second"])
    best = np.min(prefix, 0).max()
    assert best >= 0.5, np.min(prefix, 0)
    assert max(losses) < 1.0, losses
    before = load(trainer.models_dir / trainer.checkpoints[0]["model"])
    assert numpy_scores(before, tokens, 27, 3)["second"] > 3.5  # at step 0 it guesses: about ln 64 = 4.2


def test_the_phase_change_is_marked_where_the_in_context_loss_drops(grown):
    trainer, _ = grown
    phase = trainer.record()["phase_change"]
    losses = {c["step"]: c["scores"]["in_context_loss"] for c in trainer.checkpoints}
    assert phase is not None and phase["formed"] == trainer.step
    assert phase["start"] <= phase["step"] <= phase["end"] <= trainer.step
    assert losses[0] > 3.5 and losses[phase["end"]] <= losses[phase["step"]] <= losses[phase["start"]]
    assert losses[phase["start"]] < phase["plateau_loss"] and losses[phase["end"]] < 1.5
    assert phase["drop_nats"] == pytest.approx(phase["plateau_loss"] - phase["lowest_loss"], abs=1e-3)


def test_the_same_spec_grows_the_same_weights_again(grown, tmp_path):
    """A second trainer of the recipe, to its second checkpoint (step 25): the same weights, so the same folders."""
    trainer, kept = grown
    again = Trainer(RECIPE, tmp_path)
    while len(again.checkpoints) < 2:
        again.advance(seconds=float("inf"))
    assert again.step == 25
    assert [c["model"] for c in again.checkpoints] == [c["model"] for c in trainer.checkpoints[:2]]
    for name, tensor in weights_of(again.model).items():
        # bit for bit: same shapes (the same steps on the same batches)
        assert torch.equal(tensor, kept[again.step][name]), name
    assert again.losses == trainer.losses[: again.step]


def test_a_training_paused_and_resumed_from_its_saved_state_is_the_uninterrupted_one(grown_recipe, tmp_path):
    """Stopped after 12 steps and step 13's forward pass (between checkpoints), its state saved as a server saves
    it and read back by a new trainer: at step 25 the weights, AdamW's moments and the curve are the uninterrupted
    run's (the session's)."""
    trainer = grown_recipe.trainer
    first = Trainer(RECIPE, tmp_path)
    while first.step < 12:
        first.advance(seconds=0)  # a phase of a step a slice, and the checkpoints due
    first.advance(seconds=0)  # step 13's forward pass: its state is still step 12's
    resumed = Trainer(RECIPE, tmp_path, saved_and_read(first.state()))
    while len(resumed.checkpoints) < 2:
        resumed.advance(seconds=float("inf"))
    assert resumed.step == 25 and [c["step"] for c in resumed.checkpoints] == [0, 25]
    for name, tensor in weights_of(resumed.model).items():
        assert torch.equal(tensor, grown_recipe.weights(25)[name]), name  # bit for bit: same shapes (the same steps)
    assert resumed.losses == trainer.losses[:25]
    assert [c["model"] for c in resumed.checkpoints] == [c["model"] for c in trainer.checkpoints[:2]]
    moments, theirs = resumed.optimizer.state_dict()["state"], grown_recipe.states[25]["optimizer"]["state"]
    assert moments.keys() == theirs.keys()
    for key in moments:
        for part in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(moments[key][part], theirs[key][part])  # bit for bit: same shapes (the same steps)


def test_a_slice_goes_on_while_nobody_waits_and_ends_at_the_phase_after_someone_comes(tmp_path):
    """A server's slice is one phase of a step (its forward pass, its backward pass, its optimizer step) while
    someone waits for the model; while nobody does it goes on, and it ends at the first phase after someone comes
    (here the seventh: `waited_for` says no six times). A slice never runs into a checkpoint due. The clock's
    longest slice is lifted so that only the waiting decides."""
    trainer, endless = Trainer(RECIPE, tmp_path), float("inf")
    trainer.advance(endless)  # the checkpoint at step 0
    answers = iter([False] * 6 + [True])
    trainer.advance(endless, waited_for=lambda: next(answers))
    assert trainer.step == 2 and len(trainer.losses) == 2  # and step 3's forward pass run
    trainer.advance(endless, waited_for=lambda: True)  # its backward pass
    assert trainer.step == 2
    trainer.advance(endless, waited_for=lambda: True)  # its optimizer step
    assert trainer.step == 3
    trainer.advance(endless)
    assert trainer.step == 25 and len(trainer.checkpoints) == 1  # the checkpoint due is the next slice's


def test_a_notebook_grows_the_same_model_and_shows_it_with_the_labs_widget(grown, tmp_path):
    """attention_lab.grow: the lab's training in the kernel, the recipe's checkpoints the lab's own folders; show()
    draws the last one with the page's views, its tokens the syllables of the prompt."""
    from attention_lab import grow

    trainer, _ = grown
    small = grow(tmp_path, steps=25)  # the recipe's first 25 steps: its first two checkpoints
    assert [c["model"] for c in small.checkpoints] == [c["model"] for c in trainer.checkpoints[:2]]
    assert small.losses == trainer.losses[:25] and small.phase_change is None
    assert small.folder(25) == tmp_path / trainer.checkpoints[1]["model"]
    widget = small.show()
    assert widget.error == "" and widget.config["model"]["name"] == small.folder().name
    assert (widget.config["model"]["layers"], widget.config["model"]["heads"]) == (2, 2)
    assert [token["text"] for token in widget.run["tokens"]][:3] == ["ko", "ra", "ti"]
