"""The induction recipe grown once for the whole test session (tests/conftest.py's `grown_recipe`), in the engine
on one core, up to its first checkpoint with an induction head (about step 275 of its 600). Every test that needs
the recipe's checkpoints, or a lab that has grown some of it, reads this one growth rather than growing its own:
issue 56 lets all of training add at most a minute to the suite on 2 cores."""

import io
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from app.engine.training.checks import check
from app.engine.training.spec import TrainingSpec
from app.engine.training.trainer import Trainer
from app.serving.gate import Client
from app.serving.training import Folder, Owner, browser_of, record_of, save_ended

RECIPE = TrainingSpec()
# A request from 127.0.0.1 without the lab's cookie (a script's): the tests' teachers there may move the training.
SCRIPT = Owner(browser_of(Client("127.0.0.1")))


def saved_and_read(state: dict) -> dict:
    """A trainer's state as a server saves it (resume.pt) and reads it back: tensors of its own, apart from the
    trainer's, which go on changing."""
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    return torch.load(saved, weights_only=True)


@dataclass
class GrownRecipe:
    trainer: Trainer  # at its first checkpoint with an induction head
    states: dict[int, dict]  # at each checkpoint's step, what resumes the training from there (Trainer.state)

    @property
    def models_dir(self) -> Path:
        return self.trainer.models_dir

    def weights(self, step: int) -> dict[str, torch.Tensor]:
        """The weights as the trainer held them when it kept the checkpoint of `step`."""
        return self.states[step]["model"]

    @property
    def plateau_step(self) -> int:
        """The last checkpoint before the held-out in-context loss starts to drop."""
        start = self.trainer.record()["phase_change"]["start"]
        return max(step for step in self.states if step < start)

    def in_lab(self, data_dir: Path, step: int, state: str = "paused", owner: Owner = SCRIPT) -> dict:
        """A lab's data folder holding the recipe's training as a lab that grew it to the checkpoint of `step` and
        left it `state` keeps it (app.serving.training.save_ended), its checkpoints so far among the folder's
        models: a lab on that folder answers it, serves its checkpoints and goes on from it as from its own. Its
        state.json's record."""
        trainer = Trainer(RECIPE, data_dir / "models", saved_and_read(self.states[step]))
        for checkpoint in trainer.checkpoints:
            name = checkpoint["model"]
            shutil.copytree(self.models_dir / name, trainer.models_dir / name, dirs_exist_ok=True)
        record = record_of(trainer, owner, check(RECIPE), time.time(), state)
        save_ended(Folder(data_dir / "trainings", RECIPE.train_id), trainer, record)
        return record


def grow_recipe(models_dir: Path) -> GrownRecipe:
    trainer = Trainer(RECIPE, models_dir)
    states = {}
    for piece in trainer.slices(seconds=float("inf")):
        piece()  # the steps up to a checkpoint, or the checkpoint
        checkpoint = trainer.checkpoints[-1]
        if checkpoint["step"] == trainer.step:
            states[trainer.step] = saved_and_read(trainer.state())
            if checkpoint["scores"]["formed"]:
                break
    return GrownRecipe(trainer, states)
