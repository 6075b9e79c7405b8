"""The school's deployment as compose.yaml lays it out, run from Debian's packages (no image registry is
needed): Debian's nginx with deploy/nginx.conf, in front of two `python -m app` replicas sharing a
redis-server. Only the upstream addresses, the listening port and nginx's own files differ from the
deployed config (Nginx below), so these tests exercise the real one: a class whose teacher and learner
land on different replicas, events that nginx does not hold back, and each client's own address for the
lab's per-client bounds."""

import csv
import getpass
import io
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.class_client import Listener, device, start_class
from tests.conftest import LabProcess, RedisServer, free_port, start_together

pytestmark = pytest.mark.slow

NGINX = "/usr/sbin/nginx"
DEPLOYED = Path(__file__).parents[1] / "deploy" / "nginx.conf"
PROXY = "127.0.0.1"  # the address nginx reaches the replicas from: the one they trust (compose: 172.30.0.2)

# What the nginx image of compose.yaml wraps deploy/nginx.conf in (its /etc/nginx/nginx.conf includes it in
# the http block), with this test's files, in the foreground, and one worker: its round robin then
# alternates strictly between the replicas, so the test knows the order in which they answer.
MAIN = """user {user};
worker_processes 1;
daemon off;
error_log {folder}/error.log notice;
pid {folder}/nginx.pid;
events {{
    worker_connections 1024;
}}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/client_body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    sendfile on;
    keepalive_timeout 65;
    include {folder}/default.conf;
}}
"""


def substituted(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"deploy/nginx.conf no longer has {old!r} once: update this test"
    return text.replace(old, new)


class Nginx:
    """Debian's nginx, in the foreground, serving deploy/nginx.conf on a free 127.0.0.1 port in front of
    `upstreams` (127.0.0.1 ports) instead of compose's `lab:8000`."""

    def __init__(self, folder: Path, upstreams: list[int]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = folder
        config = DEPLOYED.read_text()
        config = substituted(
            config, "    server lab:8000;\n", "".join(f"    server {PROXY}:{port};\n" for port in upstreams)
        )
        config = substituted(config, "listen 80;", f"listen 127.0.0.1:{self.port};")
        (folder / "default.conf").write_text(config)
        (folder / "nginx.conf").write_text(MAIN.format(user=getpass.getuser(), folder=folder))
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if not Path(NGINX).exists():
            pytest.fail(f"{NGINX} is missing: `make test` installs Debian's nginx")
        with (self.folder / "stderr.log").open("a") as log:
            self.process = subprocess.Popen(
                [NGINX, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf"), "-e", "stderr"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while not answers(f"{self.url}/api/health"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"nginx did not start:\n{(self.folder / 'stderr.log').read_text()}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def errors(self) -> list[str]:
        logged = (self.folder / "error.log").read_text() + (self.folder / "stderr.log").read_text()
        return re.findall(r".*\[(?:error|crit|alert|emerg)\].*", logged)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def school(tmp_path_factory, tiny_model_dir):
    """Redis, two replicas that trust the proxy's X-Forwarded-For, and nginx in front: (nginx, replicas)."""
    store = RedisServer(free_port())
    store.start()
    env = {
        "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
        "ATTENTION_LAB_STORE": store.url,
        "ATTENTION_LAB_TRUSTED_PROXIES": PROXY,
    }
    replicas = [LabProcess(tmp_path_factory.mktemp(f"replica-{name}"), env=env) for name in "ab"]
    start_together(*replicas)
    proxy = Nginx(tmp_path_factory.mktemp("nginx"), [replica.port for replica in replicas])
    proxy.start()
    yield proxy, replicas
    proxy.stop()
    for replica in replicas:
        replica.stop()
    store.stop()
    assert not proxy.errors(), proxy.errors()
    for replica in replicas:
        log = replica.log.read_text()
        assert "Traceback" not in log, log


def log_ends(replicas: list[LabProcess]) -> list[int]:
    return [replica.log.stat().st_size for replica in replicas]


def answered_by(replicas: list[LabProcess], ends: list[int], request: str) -> list[int]:
    """Which replicas' access logs have the request line `request` ("PUT /api/…") past `ends` (log_ends())."""
    line = f'"{request} HTTP/1.1"'.encode()
    return [
        n for n, (replica, end) in enumerate(zip(replicas, ends, strict=True)) if line in replica.log.read_bytes()[end:]
    ]


def test_a_class_whose_teacher_and_learner_are_on_different_replicas_works_through_nginx(school):
    proxy, replicas = school
    teacher, learner = device("127.0.21.1"), device("127.0.21.2")
    ends = log_ends(replicas)
    code, secret = start_class(teacher, proxy.url)
    classes = f"{proxy.url}/api/classes/{code}"
    started = answered_by(replicas, ends, "POST /api/classes")
    joined = learner.post(f"{classes}/learners", json={"nickname": "ada"}).json()["learner"]
    assert len(started) == 1 and answered_by(replicas, ends, f"POST /api/classes/{code}/learners") == [1 - started[0]]
    following = Listener(f"{classes}/events", "127.0.21.2").wait_ready()
    try:
        # Each view change reaches the learner's stream through nginx within 1 s: from the replica that holds
        # the stream, and from the other one (round robin alternates).
        delays = []
        for layer in range(4):
            view = {"layer": layer, "head": 1}
            sent = time.monotonic()
            assert teacher.put(f"{classes}/view", json={"view": view}, headers=secret).status_code == 204
            _, at = following.wait_for("view", timeout=5, where=lambda data, view=view: data["view"] == view)
            delays.append(at - sent)
        assert answered_by(replicas, ends, f"PUT /api/classes/{code}/view") == [0, 1]
        print(f"view changes reached the learner through nginx after {[round(d, 3) for d in delays]} s")
        assert max(delays) <= 1

        run = teacher.post(f"{proxy.url}/api/analyze", json={"text": "the bank of the river"}).json()["run_id"]
        ask = {"kind": "attends", "run_id": run, "token": 2, "layer": 1, "head": 0}
        question = teacher.post(f"{classes}/question", json=ask, headers=secret).json()
        vote = {"question": question["id"], "round": 1, "choice": 1}
        assert learner.put(f"{classes}/learners/{joined}/vote", json=vote).status_code == 200
        following.wait_for("votes", where=lambda data: data["votes"] == [1])
        revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
        shown, _ = following.wait_for("question", where=lambda data: data["question"]["phase"] == "revealed")
        assert shown["question"]["answer"] == revealed["answer"] and revealed["tallies"] == [{"1": 1}]
        answers_csv = teacher.get(f"{classes}/answers.csv", headers=secret)
        assert answers_csv.status_code == 200, answers_csv.text
        (row,) = [row for row in csv.DictReader(io.StringIO(answers_csv.text)) if row["row"] == "learner"]
        assert row["learner"] == "ada" and row["question id"] == question["id"] and row["round 1"]
    finally:
        following.close()


def test_the_join_link_is_the_address_the_teacher_used_through_nginx(school):
    proxy, _ = school
    started = device("127.0.22.1").post(f"{proxy.url}/api/classes").json()
    assert started["join_url"] == f"{proxy.url}/?class={started['code']}"


def test_each_client_behind_nginx_has_its_own_per_client_bounds(school):
    """Three classes at once per address (ATTENTION_LAB_MAX_CLASSES_PER_CLIENT): the fourth from 127.0.0.2 is
    refused, while 127.0.0.3, even naming 127.0.0.2 in an X-Forwarded-For of its own, starts one. Without
    the forwarded address both would be the proxy, and 127.0.0.3 refused too."""
    proxy, _ = school
    first, second = device("127.0.0.2"), device("127.0.0.3")
    for _ in range(3):
        assert first.post(f"{proxy.url}/api/classes").status_code == 201
    refused = first.post(f"{proxy.url}/api/classes")
    assert refused.status_code == 429 and "3" in refused.json()["detail"]
    other = second.post(f"{proxy.url}/api/classes", headers={"X-Forwarded-For": "127.0.0.2"})
    assert other.status_code == 201, other.text
