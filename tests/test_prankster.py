"""One prankster must not stop a class: turns by client, no work for clients that left, answers that a
stalled reader cannot pile up in memory, HTTP limits, and settings checked at start. Against the lab as
an operator runs it (`python -m app`, real sockets), with the real MiniLM where passes must take time."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from app.serving.gate import Busy, Client, PassGate, TooManyWaiting
from tests.conftest import LAB_PROTOCOL, LabProcess, free_port, run_async
from tests.floods import rss_mb

pytestmark = pytest.mark.slow


HOG_ADDRESS, LEARNER_ADDRESS = "127.0.0.66", "127.0.0.7"


def long_prompt(seed: int) -> str:
    """A different prompt of well over 512 tokens each time: a full-length pass that no cache answers."""
    return " ".join(f"w{seed}q{word}" for word in range(400))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = LabProcess(
        tmp_path_factory.mktemp("prankster"),
        env={"ATTENTION_LAB_SLOW_READER_SECONDS": "3", "ATTENTION_LAB_REQUEST_TIMEOUT_SECONDS": "2"},
    )
    lab.start()
    yield lab
    lab.stop()


def test_turns_go_round_the_clients_not_first_come_first_served():
    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=64, max_waiting_per_client=8, max_wait_seconds=10)
        hog, learner, neighbour = Client("10.0.0.9"), Client("10.0.0.7", "cookie-a"), Client("10.0.0.7", "cookie-b")
        release = asyncio.Event()
        served = []

        async def request(client, name):
            async with gate.admit(client):
                served.append(name)
                await release.wait()

        tasks = [asyncio.create_task(request(hog, f"hog{i}")) for i in range(6)]
        await asyncio.sleep(0.01)
        tasks += [asyncio.create_task(request(learner, "learner")), asyncio.create_task(request(neighbour, "nb"))]
        await asyncio.sleep(0.01)
        for _ in range(8):
            release.set()
            await asyncio.sleep(0)
            release.clear()
            await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*tasks)
        # hog0 was running; 10.0.0.7, which held no turn lately, goes first; then the turns alternate
        # between the two addresses, and within 10.0.0.7 between its two browsers.
        assert served[:5] == ["hog0", "learner", "hog1", "nb", "hog2"]
        assert gate.waiting == 0 and gate.running == 0

    run_async(scenario())


def test_one_client_past_its_bound_is_refused_alone_and_a_cancelled_wait_leaves_the_queue():
    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=64, max_waiting_per_client=2, max_wait_seconds=10)
        hog = Client("10.0.0.9")
        release = asyncio.Event()

        async def request(client):
            async with gate.admit(client):
                await release.wait()

        running = asyncio.create_task(request(hog))
        await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(request(hog)) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(TooManyWaiting) as refused:
            async with gate.admit(hog):
                pass
        assert isinstance(refused.value, Busy) and refused.value.retry_after > 0
        other = asyncio.create_task(request(Client("10.0.0.7")))  # another client still gets in line
        await asyncio.sleep(0.01)
        waiting[0].cancel()  # its client went away
        await asyncio.sleep(0.01)
        assert gate.waiting == 2
        release.set()
        await asyncio.gather(running, waiting[1], other)
        assert waiting[0].cancelled() and gate.waiting == 0 and gate.running == 0

    run_async(scenario())


def test_a_learner_beside_a_forty_connection_hog_is_served_every_time(lab):
    stop = threading.Event()
    hog_statuses = []

    async def hog():
        # The hog is a device of its own: its own loopback address, as a prankster's phone in the room is.
        transport = httpx.AsyncHTTPTransport(local_address=HOG_ADDRESS, limits=httpx.Limits(max_connections=40))
        async with httpx.AsyncClient(base_url=lab.url, timeout=60, transport=transport) as client:

            async def connection(number):
                seed = number * 10_000
                while not stop.is_set():
                    seed += 1
                    client.cookies.clear()  # a prankster keeps no cookie
                    try:
                        response = await client.post("/api/analyze", json={"text": long_prompt(seed)})
                        hog_statuses.append(response.status_code)
                    except httpx.HTTPError:
                        hog_statuses.append("error")

            await asyncio.gather(*(connection(number) for number in range(40)))

    flood = threading.Thread(target=run_async, args=(hog(),))
    flood.start()
    try:
        time.sleep(3)  # the flood is under way: passes running, the hog's queue full
        learner_device = httpx.HTTPTransport(local_address=LEARNER_ADDRESS)
        with httpx.Client(base_url=lab.url, timeout=60, transport=learner_device) as learner:
            learner.get("/")  # the page gives the browser its lab_client cookie
            waits = []
            for attempt in range(4):
                start = time.monotonic()
                response = learner.post("/api/analyze", json={"text": f"my own sentence number {attempt}"})
                waits.append(time.monotonic() - start)
                assert response.status_code == 200, response.text
    finally:
        stop.set()
        flood.join(120)
    print("learner waits", [round(wait, 2) for wait in waits], "hog answers", len(hog_statuses))
    assert max(waits) < 5
    assert 429 in hog_statuses and 503 not in hog_statuses  # the hog alone was refused


def test_requests_whose_clients_left_cost_no_pass(lab):
    runs_before = httpx.get(f"{lab.url}/api/health").json()["runs"]
    for seed in range(20):
        body = json.dumps({"text": long_prompt(10**6 + seed)}).encode()
        with socket.create_connection(("127.0.0.1", lab.port)) as client:
            client.sendall(
                b"POST /api/analyze HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        # closed at once, without reading
    time.sleep(3)
    runs_after = httpx.get(f"{lab.url}/api/health").json()["runs"]
    assert runs_after - runs_before <= 2  # the pass that had begun (and maybe one starting as it left)
    start = time.monotonic()
    assert httpx.post(f"{lab.url}/api/analyze", json={"text": long_prompt(99)}, timeout=60).status_code == 200
    assert time.monotonic() - start < 5


def test_twenty_stalled_readers_of_float32_attention_cost_a_bounded_buffer(lab):
    run_id = httpx.post(f"{lab.url}/api/analyze", json={"text": long_prompt(7)}, timeout=60).json()["run_id"]
    path = f"/api/runs/{run_id}/attention?dtype=float32"
    size = int(httpx.head(f"{lab.url}{path}", headers={"Accept-Encoding": "identity"}).headers["content-length"])
    assert size == 6 * 12 * 512 * 512 * 4  # 75 MB each
    before = rss_mb(lab.process.pid)
    readers = []
    for _ in range(20):
        reader = socket.create_connection(("127.0.0.1", lab.port))
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.sendall(f"GET {path} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        readers.append(reader)
    assert httpx.get(f"{lab.url}/api/health", timeout=5).status_code == 200
    # Each is dropped 3 s (the slow-reader timeout) after its answer stalled; on a busy machine some
    # answers start later than others, so wait for all of them, within a bound, before closing any, and
    # take the largest growth seen meanwhile.
    dropped = lambda: lab.log.read_text().count("which took nothing of its answer for 3 s")  # noqa: E731
    deadline = time.monotonic() + 15
    grown = 0.0
    while dropped() < 20 and time.monotonic() < deadline:
        grown = max(grown, rss_mb(lab.process.pid) - before)
        time.sleep(0.2)
    for reader in readers:
        reader.close()
    print(f"RSS grew {grown:.0f} MB for 20 stalled readers of {size / 1e6:.0f} MB each")
    assert grown < 200  # whole bodies would be 20 × 75 MB
    assert dropped() >= 20


def test_giant_headers_are_refused_at_once_while_health_answers(lab):
    def send_giant():
        with socket.create_connection(("127.0.0.1", lab.port)) as client:
            client.settimeout(10)
            try:
                client.sendall(b"GET /api/health HTTP/1.1\r\nHost: lab\r\nX-Junk: " + b"j" * (30 * 1024 * 1024))
            except OSError:
                pass  # the server stopped reading and closed: that is the point
            try:
                return client.recv(200)
            except OSError:
                return b""

    start = time.monotonic()
    with httpx.Client(timeout=5) as other:
        threads_answers = []
        giants = [threading.Thread(target=lambda: threads_answers.append(send_giant())) for _ in range(4)]
        for giant in giants:
            giant.start()
        assert other.get(f"{lab.url}/api/health").status_code == 200
        for giant in giants:
            giant.join(30)
    assert time.monotonic() - start < 15
    assert [answer for answer in threads_answers if answer] and all(
        answer.startswith(b"HTTP/1.1 431") for answer in threads_answers if answer
    )


def test_the_header_limit_counts_a_head_that_arrives_in_pieces_and_each_request_of_a_connection(lab):
    def send(connection, request: bytes) -> bytes:
        for start in range(0, len(request), 1000):
            connection.sendall(request[start : start + 1000])
        return connection.recv(200)

    limit = 64 * 1024  # the default max_header_bytes
    head = lambda junk: f"GET /api/health HTTP/1.1\r\nHost: lab\r\nX-Junk: {'j' * junk}\r\n\r\n".encode()  # noqa: E731
    body = b'{"text": "a first request with a body"}'
    post = (
        b"POST /api/analyze HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with socket.create_connection(("127.0.0.1", lab.port)) as connection:
        connection.settimeout(30)
        assert send(connection, post).startswith(b"HTTP/1.1 200")
        while b'"ablated"' not in connection.recv(65536):  # the rest of the analyze answer
            pass
        # The next head on the same connection is counted from its own first byte.
        assert send(connection, head(limit - 100)).startswith(b"HTTP/1.1 200")
    with socket.create_connection(("127.0.0.1", lab.port)) as connection:
        connection.settimeout(30)
        assert send(connection, head(limit + 100)).startswith(b"HTTP/1.1 431")


def test_a_half_sent_request_is_answered_408_and_closed(lab):
    with socket.create_connection(("127.0.0.1", lab.port)) as client:
        client.settimeout(10)
        client.sendall(b"GET /api/health HTTP/1.1\r\nHost: lab\r\n")  # no blank line: never finished
        start = time.monotonic()
        answer = client.recv(200)
        assert answer.startswith(b"HTTP/1.1 408") and 1.5 < time.monotonic() - start < 6
        assert client.recv(200) == b""  # closed


def test_responses_carry_no_server_banner(lab):
    assert "server" not in httpx.get(f"{lab.url}/api/health").headers


def test_past_its_connection_bound_one_address_is_refused_until_its_connections_free(tmp_path, tiny_model_dir):
    lab = LabProcess(
        tmp_path,
        env={
            "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
            "ATTENTION_LAB_MAX_CONNECTIONS_PER_CLIENT": "8",
            "ATTENTION_LAB_REQUEST_TIMEOUT_SECONDS": "2",
            "ATTENTION_LAB_RESERVE_BYTES": "0",
        },
    )
    lab.start()
    try:
        idle = [socket.create_connection(("127.0.0.1", lab.port), source_address=("127.0.0.3", 0)) for _ in range(8)]
        for connection in idle:
            connection.sendall(b"GET / HTTP/1.1\r\n")  # half-sent: each holds a connection
        ninth = socket.create_connection(("127.0.0.1", lab.port), source_address=("127.0.0.3", 0))
        ninth.settimeout(5)
        assert ninth.recv(200).startswith(b"HTTP/1.1 429")  # refused at once, before it sends anything
        ninth.close()
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
            assert other.get(f"{lab.url}/api/health").status_code == 200  # another address
        for connection in idle:  # the half-sent requests time out (408) and their connections close
            connection.settimeout(5)
            assert connection.recv(200).startswith(b"HTTP/1.1 408")
            connection.close()
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3")) as again:
            assert again.get(f"{lab.url}/api/health").status_code == 200
    finally:
        lab.stop()


def start(env: dict[str, str], command=("-m", "app")) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command, "--port", str(free_port())],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("MAX_RUNS", "-5", "ATTENTION_LAB_MAX_RUNS=-5: valid: 1 to 100,000"),
        ("MAX_BODY_BYTES", "-1", "ATTENTION_LAB_MAX_BODY_BYTES=-1: valid: 1,024 to 67,108,864"),
        ("MAX_CONCURRENT_PASSES", "0", "ATTENTION_LAB_MAX_CONCURRENT_PASSES=0: valid: 1 to 64"),
        ("MAX_WAIT_SECONDS", "soon", "ATTENTION_LAB_MAX_WAIT_SECONDS=soon: valid: 0.1 to 600"),
    ],
)
def test_a_bad_setting_stops_python_m_app_in_one_line(name, value, expected):
    result = start({f"ATTENTION_LAB_{name}": value})
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"attention-lab: bad setting {expected}"]


def test_a_bad_setting_stops_uvicorn_in_one_line_not_a_traceback():
    result = start({"ATTENTION_LAB_MAX_RUNS": "-5"}, ("-m", "uvicorn", "app.main:app", "--http", LAB_PROTOCOL))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "attention-lab" in line] == [
        "ERROR:    attention-lab: bad setting ATTENTION_LAB_MAX_RUNS=-5: valid: 1 to 100,000"
    ]


def test_an_empty_model_path_means_the_packaged_model(tmp_path):
    lab = LabProcess(tmp_path, env={"ATTENTION_LAB_MODEL_PATH": ""})
    lab.start()
    try:
        assert httpx.get(f"{lab.url}/api/model").json()["name"] == "sentence-transformers/all-MiniLM-L6-v2"
    finally:
        lab.stop()
