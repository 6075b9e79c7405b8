"""A training, step by step and in slices, as nanoGPT's train.py reads: a batch, the forward pass, the loss,
backward, a clipped AdamW step; every checkpoint_every steps the heads scored on held-out sequences and the model
kept as a folder the lab serves. A server runs a slice per turn of its gate: a step's phases (its forward pass, its
backward pass, its optimizer step) while nobody else waits for the model, so that a learner who comes waits for one
phase. Slices never change the numbers: the same operations in the same order, a step's batch from the spec's seed
and the step alone, and a training resumed from its saved state (its weights, AdamW's moments and the step, as
they were before a step under way) goes on exactly as one never stopped."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.nn.functional import cross_entropy

from app.engine.threads import on_cores
from app.engine.training.data import Data, conditions
from app.engine.training.model import build, model_card, parameter_count, save_checkpoint
from app.engine.training.scores import head_scores, phase_change
from app.engine.training.spec import TrainingSpec

# A slice's phases (a step's forward pass, its backward pass, its optimizer step) go on while nobody waits for
# the model, for at most this long: each slice costs the server a turn of its gate and two hops between threads,
# about 2 ms, 4% of a slice of one step. A learner who comes meanwhile waits for the phase under way.
SLICE_SECONDS = 0.25
# A grown model's operations are too small to share out: a second core's team only adds its wake-ups to every one
# of a step's few hundred operations, many times the step's own time on a busy machine (bench/README.md).
CORES = 1
FLOAT_BYTES = 4


class Trainer:
    def __init__(self, spec: TrainingSpec, models_dir: Path, resumed: dict | None = None):
        """The spec's model at step 0, or at the step of `resumed` (Trainer.state), its checkpoints kept under
        `models_dir`."""
        self.spec = spec
        self.models_dir = models_dir
        self.data = Data(spec)
        self.conditions = conditions(spec)
        self.model = build(spec, self.data.vocab_size)
        self.model.train()
        self.parameters = [weight for weight in self.model.parameters() if weight.requires_grad]
        matrices = [weight for weight in self.parameters if weight.dim() >= 2]
        vectors = [weight for weight in self.parameters if weight.dim() < 2]  # norms (and biases): no decay
        self.optimizer = torch.optim.AdamW(
            [{"params": matrices, "weight_decay": spec.weight_decay}, {"params": vectors, "weight_decay": 0.0}],
            lr=spec.lr,
            betas=(spec.beta1, spec.beta2),
        )
        self.step = 0
        self.losses: list[float] = []  # the training loss at each step
        self.checkpoints: list[dict] = []  # {"step", "model", "bytes", "scores"} each
        self.seconds = 0.0  # spent in steps and checkpoints
        self._under_way: Iterator[str] | None = None  # the step whose phases a slice ended between
        if resumed is not None:
            self.model.load_state_dict(resumed["model"])
            self.optimizer.load_state_dict(resumed["optimizer"])
            self.step = resumed["step"]
            self.losses = list(resumed["losses"])
            self.checkpoints = list(resumed["checkpoints"])
            self.seconds = resumed["seconds"]

    @property
    def done(self) -> bool:
        return self.step >= self.spec.steps and self._checkpointed

    @property
    def _checkpointed(self) -> bool:
        """Whether the step's checkpoint, where one is due, has been kept."""
        due = self.step % self.spec.checkpoint_every == 0 or self.step == self.spec.steps
        return not due or bool(self.checkpoints) and self.checkpoints[-1]["step"] == self.step

    def learning_rate(self, step: int) -> float:
        """Linear warm-up over `warmup` steps, then constant."""
        if step < self.spec.warmup:
            return self.spec.lr * (step + 1) / self.spec.warmup
        return self.spec.lr

    def step_phases(self) -> Iterator[str]:
        """One step, paused after its forward pass and after its backward pass (a slice may end there): a batch,
        the forward pass and the loss; backward; the clipped AdamW step. Its state (Trainer.state) is the step's
        before until the last phase has run."""
        tokens, targets = self.data.batch(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(self.step)
        logits = self.model(input_ids=tokens).logits  # [batch, position, vocab]
        # position i predicts the token at i + 1; targets of -100 (a repeat's unpredictable tokens) count for nothing
        loss = cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-100)
        yield "forward"
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        yield "backward"
        if self.spec.clip:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.spec.clip)
        self.optimizer.step()
        self.step += 1
        self.losses.append(round(loss.item(), 5))

    def checkpoint(self) -> dict:
        """The heads scored and the model kept as a folder (app.engine.training.model.save_checkpoint)."""
        scores = head_scores(self.model, self.data, self.conditions)
        card = model_card(self.spec, self.step, card_scores(scores))
        about = {"train_id": self.spec.train_id, "step": self.step, "steps": self.spec.steps}
        name, nbytes = save_checkpoint(self.model, self.data.tokenizer, self.models_dir, card, about)
        entry = {"step": self.step, "model": name, "bytes": nbytes, "scores": scores}
        self.checkpoints.append(entry)
        return entry

    def advance(self, seconds: float = SLICE_SECONDS, waited_for: Callable[[], bool] = lambda: False) -> dict:
        """One slice: the checkpoint due, or the steps' phases (step_phases) until `seconds` have passed, someone
        waits for the model (`waited_for()`), a checkpoint is due or the training is done. Its progress, for the
        page."""
        started = time.perf_counter()
        try:
            with on_cores(CORES):
                self._advance(started, seconds, waited_for)
            return self.progress()
        finally:
            self.seconds += time.perf_counter() - started

    def _advance(self, started: float, seconds: float, waited_for: Callable[[], bool]) -> None:
        if not self._checkpointed:
            self.checkpoint()
            return
        while self.step < self.spec.steps:
            if self._under_way is None:
                self._under_way = self.step_phases()
            if next(self._under_way, None) is None:  # the step's last phase ran
                self._under_way = None
                if not self._checkpointed:
                    return  # a checkpoint due is the next slice's: a slice of steps and a checkpoint was twice as long
            if waited_for() or time.perf_counter() - started >= seconds:
                return

    def slices(
        self, seconds: float = SLICE_SECONDS, waited_for: Callable[[], bool] = lambda: False
    ) -> Iterator[Callable[[], dict]]:
        """The rest of the training, a slice at a time (advance)."""
        while not self.done:
            yield lambda: self.advance(seconds, waited_for)

    def run(self) -> "Trainer":
        """The whole rest of the training at once (a notebook's, a test's)."""
        for piece in self.slices(seconds=float("inf")):
            piece()
        return self

    def progress(self) -> dict:
        return {
            "step": self.step,
            "steps": self.spec.steps,
            "loss": self.losses[-1] if self.losses else None,
            "checkpoints": len(self.checkpoints),
            "seconds": round(self.seconds, 3),
        }

    def record(self) -> dict:
        """The curves and the checkpoints so far, with the phase change where the measures say it is."""
        return {
            **self.progress(),
            "losses": self.losses,
            "checkpoints": self.checkpoints,
            "phase_change": phase_change(self.checkpoints),
        }

    def state(self) -> dict:
        """What resumes the training exactly (Trainer(spec, models_dir, resumed=state)): weights, AdamW's moments,
        the step and the record; tensors and plain values only (torch.load(weights_only=True) reads it)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "losses": self.losses,
            "checkpoints": self.checkpoints,
            "seconds": self.seconds,
        }


def card_scores(scores: dict) -> dict:
    """What a model card says of its heads: the induction head, its score and the in-context loss."""
    layer, head = scores["induction_head"]
    return {
        "best induction head": f"{layer}.{head}",
        "its prefix-matching score (least over held-out conditions)": scores["induction_score"],
        "in-context loss (nats, held-out conditions)": scores["in_context_loss"],
        "an induction head formed": scores["formed"],
    }


def training_bytes(spec: TrainingSpec, vocab_size: int) -> int:
    """The training's peak memory beside the lab, from its shapes: the weights, their gradients and AdamW's two
    moments (4 floats a weight), a copy of the weights while a checkpoint is written, and the larger of a step's
    activations and a checkpoint's held-out passes. A step keeps, for its backward pass, about a dozen
    [batch, position, hidden] tensors a block (norms, q, k, v and their rotations, the attention's output, the
    residual) and three [batch, head, position, position] ones (scores, weights, their gradient), then the logits
    with their log-softmax and gradient; a held-out pass keeps every block's attention weights
    (output_attentions) and its logits in float64 besides."""
    weights = parameter_count(spec, vocab_size)
    tokens = spec.batch * spec.length
    width = spec.hidden if spec.attention_only else spec.hidden + 3 * spec.mlp_width
    per_block = 12 * tokens * width + 3 * spec.batch * spec.heads * spec.length**2
    step = spec.layers * per_block + 4 * tokens * vocab_size
    from app.engine.training.data import TEST_SEQUENCES, longest_test

    test = longest_test(spec)
    held_out = TEST_SEQUENCES * (
        3 * spec.layers * spec.heads * test**2 + 2 * spec.layers * 12 * test * width + 3 * test * vocab_size
    )
    return FLOAT_BYTES * (5 * weights + max(step, 2 * held_out))
