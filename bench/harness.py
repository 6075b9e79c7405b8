"""What every scenario of the benchmark uses: the environment it runs in (set on import, before torch), texts of
exactly n tokens, the raw model (transformers alone: the floor nothing can beat), the lab as a server of its own
on a free loopback port, and medians."""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

# Set before transformers is imported: the weights come from the installed package, never a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
# This checkout's app and tests (the long-context table builds its model with the tests' builder), whichever
# checkout the installed package points to.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Before torch: the raw side's OpenMP workers spin as the lab's do (app/__init__.py sets GOMP_SPINCOUNT). With
# libgomp's default they spun on for 7-10 ms of CPU after every raw pass, on the two cores where the lab was
# then answering: the lab's 10-token analyze took 21.6 ms beside them against 15.0 with this.
import app  # noqa: E402, F401

# isort: split
import httpx  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModel  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
# Whole vocabulary words, one token each, so a text's length can be set one token at a time.
FILLER = (
    "the old river ran past quiet green fields while children counted birds above a stone bridge and "
    "their teacher read a long story about sailors who crossed cold seas to find new land"
).split()


class Texts:
    """Texts of exactly n tokens, each one different: the lab caches a repeated prompt."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.count = 0
        for word in FILLER:
            assert self.pieces(word) == 1, f"filler word {word!r} is not a single token"

    def pieces(self, word: str) -> int:
        return len(self.tokenizer(word, add_special_tokens=False)["input_ids"])

    def unique(self, n: int) -> str:
        self.count += 1
        tag = f"take{self.count}"  # the only word that differs between texts
        fill = n - 2 - self.pieces(tag)  # 2 for [CLS] and [SEP]
        words = [tag] + [FILLER[i % len(FILLER)] for i in range(fill)]
        text = " ".join(words)
        assert self.length(text) == n, f"built {self.length(text)} tokens, wanted {n}"
        return text

    def length(self, text: str) -> int:
        return len(self.tokenizer(text)["input_ids"])


def load_raw_model(path: str):
    transformers_logging.disable_progress_bar()  # a loading bar would break up the printed report
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    model.eval()
    return model


def time_raw_forward(model, tokenizer, text: str) -> float:
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        start = time.perf_counter()
        model(input_ids=ids, output_attentions=True)
        return ms_since(start)


def time_raw_floor(model, tokenizer, texts: "Texts", n: int) -> float:
    """The faster of two raw passes in a row: on this virtual machine a pass right after an idle moment
    (here, while the lab answered) waits for idle cores to wake, up to twice as long at N=8."""
    return min(time_raw_forward(model, tokenizer, texts.unique(n)) for _ in range(2))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def lab_server(env: dict[str, str] | None = None, code: Path = REPO):
    """The lab as `python -m app` on a free loopback port, from the code in `code` (this checkout by default);
    yields (base URL, process)."""
    port = free_port()
    # A file, not a pipe: nobody reads the access log while we run, and a full pipe would block uvicorn.
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=code,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for_health(base, process, log)
            yield base, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_health(base: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the lab exited at start:\n{log.read()}")
        try:
            if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the lab did not answer /api/health within 120 s")


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def median(samples: list[dict], key: str) -> float:
    return statistics.median(sample[key] for sample in samples)


def proc_status_mb(pid: int) -> dict:
    """Peak (VmHWM) and current (VmRSS) resident memory of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) / 1024  # the kernel reports kB
    return {"peak_rss_mb": fields["VmHWM"], "rss_mb": fields["VmRSS"]}


def cpu_ms(pid: int) -> float:
    """The CPU time a process has used, user and system, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
