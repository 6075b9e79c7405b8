import asyncio
import atexit
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
import torch
from fastapi.testclient import TestClient
from transformers import BertConfig, BertModel

from app.engine.model import load_model, packaged_model_path
from app.main import create_app
from app.serving.gate import PassGate
from app.serving.lab import Lab
from app.serving.spec_store import SqliteSpecStore
from app.settings import ENV_PREFIX, get_settings
from tests.grown import GrownRecipe, grow_recipe
from tests.zygote import exit_path


def run_async(coroutine):
    """asyncio.run on a thread of its own: Playwright's sync API keeps an event loop running on the main
    thread for the rest of the session, and asyncio.run refuses to start inside it."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


REPO = Path(__file__).resolve().parents[1]
REDIS_SERVER = "/usr/bin/redis-server"


class RedisServer:
    """Debian's redis-server on a 127.0.0.1 port, writing nothing to disk; stop() and start() again on the
    same port are an operator's restart."""

    def __init__(self, port: int):
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if not Path(REDIS_SERVER).exists():
            pytest.fail(f"{REDIS_SERVER} is missing: `make test` installs Debian's redis-server")
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer(free_port())
    server.start()
    yield server
    server.stop()


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="session", autouse=True)
def data_dir(tmp_path_factory) -> Path:
    """Every app and lab process of the session keeps its run store here, never in the checkout's data/."""
    folder = tmp_path_factory.mktemp("data")
    os.environ["ATTENTION_LAB_DATA_DIR"] = str(folder)
    get_settings.cache_clear()
    return folder


def spec_store(folder: Path, max_specs: int = 1000) -> SqliteSpecStore:
    return SqliteSpecStore(folder / "runs.sqlite3", max_specs=max_specs, max_age_seconds=86_400, timeout_seconds=2)


def make_lab(model, folder: Path, max_runs: int = 8, max_chars: int = 1000, passes: int = 1) -> Lab:
    return Lab(
        model,
        spec_store(folder),
        PassGate(passes, 64, 4, 30),
        max_chars=max_chars,
        max_runs=max_runs,
        max_cache_bytes=10**9,
    )


@pytest.fixture(scope="session")
def minilm():
    """The real packaged all-MiniLM-L6-v2."""
    return load_model()


@pytest.fixture(scope="session")
def lab(minilm, tmp_path_factory):
    return make_lab(minilm, tmp_path_factory.mktemp("lab"), max_runs=64, max_chars=20_000)


@pytest.fixture(scope="session")
def grown_recipe(tmp_path_factory) -> GrownRecipe:
    """The induction recipe grown once for the session, to its first checkpoint with an induction head (tests/grown.py):
    its checkpoints, its state at each, and a lab's data folder holding it at any of them."""
    return grow_recipe(tmp_path_factory.mktemp("grown-recipe"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random 2-block BERT with MiniLM's tokenizer: fast, and a different shape from MiniLM's."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(packaged_model_path() / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="session")
def client(minilm):
    with TestClient(create_app(minilm)) as test_client:
        yield test_client


LAB_PROTOCOL = "app.serving.server:LabProtocol"  # uvicorn's --http for the lab (app.serving.server)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def without_lab_settings(env) -> dict:
    """env less the lab's settings and pytest's PYTEST_CURRENT_TEST, which names the test phase under way: kept, it
    made every lab started after the phase that started the zygote start fresh, with all the imports."""
    return {key: value for key, value in env.items() if not key.startswith(ENV_PREFIX) and key != "PYTEST_CURRENT_TEST"}


class Forked:
    """A lab forked by the zygote, with the part of Popen's interface the tests use. Its parent is the zygote,
    which writes its exit status beside its log when it ends."""

    def __init__(self, pid: int, log: Path):
        self.pid = pid
        self.exit = exit_path(log)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.exit.exists() and self.exit.read_text():
            self.returncode = int(self.exit.read_text())
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"lab {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """tests/zygote.py in a process of its own, started once per test session with the suite's environment."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="attention-lab-zygote-"))
        self.socket = str(self.folder / "forks")
        self.env = {**without_lab_settings(os.environ), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", self.socket], env=self.env, stdout=subprocess.PIPE, cwd=REPO
        )
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError("the zygote did not start")

    def takes(self, env: dict) -> bool:
        """Whether a lab of this environment can be forked here: it differs from the zygote's only in the lab's
        settings (libraries read the rest, such as the hub's cache or MKL's kernels, when they are imported)."""
        return {**without_lab_settings(env), "PYTHONUNBUFFERED": "1"} == self.env

    def fork(self, args: list[str], env: dict, log: Path) -> Forked:
        exit_path(log).unlink(missing_ok=True)
        request = {"args": args, "env": env, "cwd": os.getcwd(), "log": str(log)}
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(self.socket)
            connection.sendall((json.dumps(request) + "\n").encode())
            pid = int(connection.makefile().readline())
        return Forked(pid, log)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


@functools.cache
def zygote() -> Zygote:
    started = Zygote()
    atexit.register(started.stop)
    return started


@dataclass(frozen=True)
class Ended:
    returncode: int
    output: str  # what it wrote to stdout and stderr, in order


def run_app(args: list[str], env: dict, timeout: float = 120) -> Ended:
    """`python -m app ARGS` run to its end (a start that fails), forked from the suite's zygote as LabProcess's
    labs are where only the lab's settings differ, else a fresh process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    if zygote().takes(env):
        log = Path(tempfile.mkstemp(suffix=".log", dir=zygote().folder)[1])
        returncode = zygote().fork(args, env, log).wait(timeout)
        return Ended(returncode, log.read_text())
    command = [sys.executable, "-m", "app", *args]
    ended = subprocess.run(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    return Ended(ended.returncode, ended.stdout)


class LabProcess:
    """The lab as an operator starts it, in its own process on a free 127.0.0.1 port: `python -m app`
    unless another command is given. stop() and then start() on the same port are a restart."""

    def __init__(self, folder: Path, command: tuple[str, ...] = ("-m", "app"), env=None, workers: int = 1, fresh=False):
        """fresh: a process of its own from the start, as an operator's is; otherwise, where only the lab's
        settings differ from the suite's environment, forked from the suite's zygote (tests/zygote.py), which
        has done the imports already. A lab whose memory a test measures is fresh. With --workers, what is
        forked is the supervisor: uvicorn spawns the workers as fresh processes either way."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, *command, "--host", "127.0.0.1", "--port", str(self.port)]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.workers = workers
        self.forkable = not fresh and command[:2] == ("-m", "app")
        self.log = folder / "server.log"
        self.log.touch()
        self.process: subprocess.Popen | Forked | None = None

    def start(self) -> None:
        """Starts the server and returns once every worker has started and the lab answers."""
        start_together(self)

    def launch(self) -> int:
        """Starts the server's process; returns where its log was, for wait_started."""
        seen = self.log.stat().st_size
        if self.forkable and zygote().takes(self.env):
            self.process = zygote().fork(self.command[3:], self.env, self.log)  # after `python -m app`
            return seen
        with self.log.open("a") as log:  # a file, not a pipe: a full pipe would stall a server nobody reads
            self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return seen

    def wait_started(self, seen: int) -> None:
        deadline = time.monotonic() + 180
        while not self._started(seen):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"the lab did not start:\n{self.log.read_bytes()[seen:].decode()}")
            time.sleep(0.3)

    def _started(self, seen: int) -> bool:
        workers = self.log.read_bytes()[seen:].count(b"Application startup complete")
        return workers >= self.workers and _answers(self.url)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def start_together(*labs: LabProcess) -> None:
    """Starts the labs at once and returns once each has started: a start is mostly one core's imports and
    model load, so two starting together on two cores take about the time of one."""
    seen = [lab.launch() for lab in labs]
    for lab, offset in zip(labs, seen, strict=True):
        lab.wait_started(offset)


# A proxy the live lab trusts: a test that sends from this address, naming a client in X-Forwarded-For, is a
# client on another machine (as phones are). No other test sends from it.
LIVE_LAB_PROXY = "127.0.0.254"


@pytest.fixture(scope="session")
def live_lab(tmp_path_factory):
    """The lab as a user runs it, `python -m app`, on a free 127.0.0.1 port, behind LIVE_LAB_PROXY too. The
    whole suite's teachers start their classes on it from 127.0.0.1: more than the 12 an hour an address is
    allowed by default (tests/test_classroom.py tests that bound on a lab of its own)."""
    env = {"ATTENTION_LAB_TRUSTED_PROXIES": LIVE_LAB_PROXY, "ATTENTION_LAB_CLASS_STARTS_PER_HOUR": "1000"}
    lab = LabProcess(tmp_path_factory.mktemp("live-lab"), env=env)
    lab.start()
    yield lab
    lab.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def server(live_lab) -> str:
    return live_lab.url


def left_midway(lab: "LabProcess", answer: str, progress: str) -> dict:
    """Asks for `answer` (a corpus's long computation), leaves once `progress` says two of its slices are done,
    and waits for the lab's log to say the work was called off: the progress as the client left."""
    seen = lab.log.stat().st_size

    async def leave():
        async with httpx.AsyncClient(timeout=120) as client:
            waiting = asyncio.ensure_future(client.get(f"{lab.url}{answer}"))
            while (found := (await client.get(f"{lab.url}{progress}")).json())["done"] < 2:
                assert not waiting.done()
            waiting.cancel()
            return found

    found = run_async(leave())
    assert found["state"] == "running" and 2 <= found["done"] < found["total"]
    deadline = time.monotonic() + 30
    while b"called off" not in lab.log.read_bytes()[seen:]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return found
