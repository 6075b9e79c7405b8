"""Growing a model (bench.py --training-only: that alone, printed, nothing written), side by side in one run:

- a bare torch loop: the recipe's model (app.engine.training.model.build), its batches (Data.batch), AdamW with
  the same groups, warm-up and clip, the same seed, on one core: forward, loss, backward, step, nothing else;
- the lab: the same spec started with POST /api/train on a lab server of its own, timed by the client from the
  POST to the status that says it is done, its head scores and checkpoints (every 25 steps) included;
- the recipe's wall time from that POST to the first status whose phase change says an induction head formed;
- a learner's analyze (a new 15-token text each time) on the idle lab, then while the recipe trains at another
  seed.

The bare loop runs here while no lab trains, and the lab's timed trainings with nothing else asked of it."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import statistics
import tempfile
import threading
import time

import httpx
import torch
from harness import lab_server
from torch.nn.functional import cross_entropy

from app.engine.threads import on_cores
from app.engine.training.data import Data
from app.engine.training.model import build
from app.engine.training.spec import TrainingSpec
from app.engine.training.trainer import CORES

ANALYSES = 12  # a learner's analyses, idle and during the training
FOLLOW_SECONDS = 0.1  # how often the client reads the training's status


def bare_loop(spec: TrainingSpec) -> float:
    """Seconds for the spec's steps in plain torch, on the cores a lab's training uses."""
    data = Data(spec)
    model = build(spec, data.vocab_size)
    model.train()
    parameters = [weight for weight in model.parameters() if weight.requires_grad]
    optimizer = torch.optim.AdamW(
        [
            {"params": [w for w in parameters if w.dim() >= 2], "weight_decay": spec.weight_decay},
            {"params": [w for w in parameters if w.dim() < 2], "weight_decay": 0.0},
        ],
        lr=spec.lr,
        betas=(spec.beta1, spec.beta2),
    )
    batches = [data.batch(step) for step in range(spec.steps)]  # drawn before the clock, as a loader's would be
    with on_cores(CORES):
        start = time.perf_counter()
        for step, (tokens, targets) in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = spec.lr * min(1.0, (step + 1) / spec.warmup) if spec.warmup else spec.lr
            logits = model(input_ids=tokens).logits
            loss = cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-100)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, spec.clip)
            optimizer.step()
        return time.perf_counter() - start


def analyze_ms(client: httpx.Client, n: int) -> float:
    start = time.perf_counter()
    answer = client.post("/api/analyze", json={"text": f"Learner {n} asks whether the river bank was steep today."})
    answer.raise_for_status()
    return (time.perf_counter() - start) * 1000


def follow(teacher: httpx.Client, body: dict) -> dict:
    """One training started with POST /api/train and read every FOLLOW_SECONDS until it ends: its wall time from
    the POST, and when (and at which step) its phase change said an induction head formed."""
    start = time.perf_counter()
    train_id = teacher.post("/api/train", json=body).json()["train_id"]
    formed_at, formed_step = None, None
    while True:
        status = teacher.get(f"/api/train/{train_id}").json()
        phase = status["phase_change"]
        if formed_at is None and phase and phase["formed"] is not None:
            formed_at, formed_step = time.perf_counter() - start, phase["formed"]
        if status["state"] != "running":
            break
        time.sleep(FOLLOW_SECONDS)
    assert status["state"] == "done", status["state"]
    return {
        "wall_s": time.perf_counter() - start,
        "steps": status["steps"],
        "checkpoints": len(status["checkpoints"]),
        "formed_s": formed_at,
        "formed_step": formed_step,
    }


def measure_training(reps: int = 1) -> dict:
    """The recipe's steps/s and its time to a head from trainings with nothing else asked of the lab (as the bare
    loop has nothing beside it), and a learner's analyses beside one more training, at another seed (a training is
    computed once)."""
    spec = TrainingSpec()
    bare = [bare_loop(spec) for _ in range(reps)]
    with lab_server({"ATTENTION_LAB_DATA_DIR": tempfile.mkdtemp(prefix="bench-training-")}) as (base, _):
        learner = httpx.Client(base_url=base, timeout=120, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        teacher = httpx.Client(base_url=base, timeout=120)
        idle = [analyze_ms(learner, n) for n in range(ANALYSES)]
        lab_runs = [follow(teacher, {} if rep == 0 else {"seed": rep}) for rep in range(reps)]
        during: list[float] = []
        stop = threading.Event()

        def ask():
            for n in range(ANALYSES):
                if stop.is_set():
                    return
                during.append(analyze_ms(learner, 1000 + n))
                time.sleep(0.5)

        beside = threading.Thread(target=ask)
        beside.start()
        follow(teacher, {"seed": reps})
        stop.set()
        beside.join()
        learner.close()
        teacher.close()
    lab_wall = statistics.median(run["wall_s"] for run in lab_runs)
    return {
        "spec": spec.train_id,
        "steps": spec.steps,
        "bare_s": statistics.median(bare),
        "lab_s": lab_wall,
        "bare_steps_per_s": spec.steps / statistics.median(bare),
        "lab_steps_per_s": spec.steps / lab_wall,
        "checkpoints": lab_runs[0]["checkpoints"],
        "formed_s": [run["formed_s"] for run in lab_runs],
        "formed_step": [run["formed_step"] for run in lab_runs],
        "idle_analyze_ms": statistics.median(idle),
        "during_analyze_ms": statistics.median(during),
        "during_analyze_max_ms": max(during),
        "runs": lab_runs,
    }


def training_line(found: dict) -> str:
    ratio = found["lab_steps_per_s"] / found["bare_steps_per_s"]
    formed = ", ".join(
        f"{seconds:.1f} s (step {step})" if seconds is not None else "none"
        for seconds, step in zip(found["formed_s"], found["formed_step"], strict=True)
    )
    return (
        f"Growing the induction recipe ({found['steps']} steps): the lab {found['lab_steps_per_s']:.1f} steps/s "
        f"({found['lab_s']:.1f} s from POST to done, {found['checkpoints']} checkpoints scored and saved) against a "
        f"bare torch loop's {found['bare_steps_per_s']:.1f} ({found['bare_s']:.1f} s): {ratio:.2f}×. Start to an "
        f"induction head: {formed}. A learner's analyze: {found['idle_analyze_ms']:.0f} ms idle, "
        f"{found['during_analyze_ms']:.0f} ms during the training (median; at most "
        f"{found['during_analyze_max_ms']:.0f} ms): {found['during_analyze_ms'] / found['idle_analyze_ms']:.2f}×."
    )
