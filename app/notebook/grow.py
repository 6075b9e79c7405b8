"""Growing a model from a notebook: the lab's own training (app.engine.training) run in the kernel, the same spec
giving the same weights as the lab's POST /api/train, its checkpoints kept where a lab sharing the data folder
serves them (ATTENTION_LAB_DATA_DIR's models/), and the model shown with the lab's widget."""

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from app.engine.training.checks import check
from app.engine.training.spec import TrainingSpec
from app.engine.training.trainer import Trainer
from app.notebook.widget import LabWidget, show
from app.settings import get_settings

# The recipe's tokens are syllables: ten of them twice, a prompt whose second half an induction head predicts.
SYLLABLE_PROMPT = "ko ra ti bu me sa lo ve du fi ko ra ti bu me sa lo ve du fi"


@dataclass
class Grown:
    """A grown model and how it grew: the training loss at every step, each checkpoint's step, served model name,
    bytes and head scores, and the phase change where the measures say it is."""

    spec: TrainingSpec
    model: PreTrainedModel  # the last step's, in training mode off
    tokenizer: PreTrainedTokenizerBase
    losses: list[float]
    checkpoints: list[dict]
    phase_change: dict | None
    models_dir: Path

    @property
    def train_id(self) -> str:
        return self.spec.train_id

    def folder(self, step: int | None = None) -> Path:
        """The checkpoint folder of `step` (the last by default): AutoModelForCausalLM.from_pretrained reads it."""
        chosen = self.checkpoints[-1] if step is None else next(c for c in self.checkpoints if c["step"] == step)
        return self.models_dir / chosen["model"]

    def show(self, text: str | None = None, step: int | None = None, **view) -> LabWidget:
        """The lab's views of `text` (by default repeated syllables the recipe's tokens read) on the checkpoint of
        `step` (the last by default)."""
        if text is None:
            text = SYLLABLE_PROMPT if self.spec.data == "repeats" else "The lab grew this model."
        return show(text, model=str(self.folder(step)), **view)


def grow(models_dir: Path | None = None, **spec) -> Grown:
    """The spec's model grown here (every field optional: none is the induction recipe), its checkpoints kept
    under `models_dir` (by default the lab's data folder's models/, where a lab sharing it serves them)."""
    training = TrainingSpec.of(**spec)
    check(training)
    folder = models_dir or get_settings().data_dir / "models"
    trainer = Trainer(training, folder).run()
    trainer.model.eval()
    record = trainer.record()
    return Grown(
        training,
        trainer.model,
        trainer.data.tokenizer,
        record["losses"],
        record["checkpoints"],
        record["phase_change"],
        folder,
    )
