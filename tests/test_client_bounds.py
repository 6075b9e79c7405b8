"""Bounds per client, not per lab: one device holding streams and half-sent requests, gathering cookies or
forging X-Forwarded-For is refused alone, and everyone else is served. Real sockets on loopback, each device
from an address of its own, against `python -m app` with the default bounds (the tiny model, and no reserve
of memory: neither changes a bound), and a second lab of 64 connections for the places kept for requests."""

import asyncio
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from app.serving.gate import Client, PassGate, TooManyWaiting
from app.serving.memory import reserve_size
from app.settings import GIB, Settings
from app.web.middleware import signature, verified_browser
from tests.class_client import device, start_class
from tests.conftest import LabProcess, free_port, run_async
from tests.floods import answered, cpu_seconds, gather_cookies, half_sent, stream, timed_get, timed_post

pytestmark = pytest.mark.slow

QUICK = {"ATTENTION_LAB_RESERVE_BYTES": "0"}  # no memory written at start: the labs here test connections


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir):
    """`python -m app` with every bound at its default."""
    lab = LabProcess(tmp_path_factory.mktemp("bounds"), env={"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir), **QUICK})
    lab.start()
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def small_lab(tmp_path_factory, tiny_model_dir):
    """A lab of 64 connections, 16 of them kept for ordinary requests, behind a trusted proxy at 127.0.0.5."""
    lab = LabProcess(
        tmp_path_factory.mktemp("small"),
        env={
            "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
            "ATTENTION_LAB_MAX_CONNECTIONS": "64",
            "ATTENTION_LAB_CONNECTIONS_KEPT_FOR_REQUESTS": "16",
            "ATTENTION_LAB_TRUSTED_PROXIES": "127.0.0.5",
            **QUICK,
        },
    )
    lab.start()
    yield lab
    lab.stop()


def served_within(url: str, address: str, seconds: float, rounds: int = 3) -> list[float]:
    """Health and an analyze of a new text from `address`, `rounds` times: each answered 200 within `seconds`."""
    times = []
    with device(address) as learner:
        for round_ in range(rounds):
            for status, took in (
                timed_get(learner, f"{url}/api/health"),
                timed_post(learner, f"{url}/api/analyze", json={"text": f"a learner's sentence {round_}"}),
            ):
                assert status == 200 and took < seconds, (status, took)
                times.append(took)
    return times


def in_a_loop(coroutine):
    """Runs an async flood on a thread of its own (its sockets stay open until it returns)."""
    return run_async(coroutine)


def test_streams_and_half_sent_requests_from_one_address_leave_everyone_else_served(lab):
    """700 class streams (each under a cookie the lab gave the device) and 600 slowloris connections from
    127.0.0.3: the class holds 600 of its streams and the address 1,000 connections; past them it alone
    is refused, and 127.0.0.2's health and analyze answer within 2 s throughout."""
    teacher = device("127.0.0.4")
    code, _ = start_class(teacher, lab.url)
    cookies = gather_cookies(lab.url, "127.0.0.3", 700)
    flood_open, done = threading.Event(), threading.Event()
    counts = {}

    async def flood():
        streams = await asyncio.gather(
            *(stream(lab.port, "127.0.0.3", f"/api/classes/{code}/events", cookie) for cookie in cookies)
        )
        slow = await asyncio.gather(*(half_sent(lab.port, "127.0.0.3") for _ in range(600)))
        statuses = await asyncio.gather(*(answered(held) for held in slow))
        counts["streams"] = [held.status for held in streams]
        counts["slow"] = statuses
        flood_open.set()
        await asyncio.to_thread(done.wait, 60)
        for held in [*streams, *slow]:
            held.close()

    flooder = threading.Thread(target=in_a_loop, args=(flood(),))
    flooder.start()
    try:
        assert flood_open.wait(60)
        times = served_within(lab.url, "127.0.0.2", 2.0)
    finally:
        done.set()
        flooder.join(60)
    streams, slow = counts["streams"], counts["slow"]
    print("streams", {s: streams.count(s) for s in set(streams)}, "slow", {s: slow.count(s) for s in set(slow)})
    print("health and analyze beside the flood, s:", [round(t, 3) for t in times])
    assert streams.count(200) == 600 and streams.count(429) == 100  # the class's bound per address
    held = streams.count(200) + streams.count(429) + slow.count(None)  # each 429 stream's connection idles on
    assert held <= 1000 and slow.count(429) >= 300  # the address's bound: refused at once past it
    assert "Traceback" not in lab.log.read_text()


def test_two_thousand_streams_under_the_default_start_cost_each_about_the_same(lab):
    """Streams of one class from 2,000 addresses (127.1.x.y): the lab takes them all, health answers within
    2 s meanwhile, and the server's CPU per stream, until every stream has heard the class's presence with
    all of them connected, is about the same at 500 and at 2,000 streams (presence goes out at most once a
    second per class, so its cost grows with the streams, not with their square)."""
    teacher = device("127.0.0.4")

    def per_stream_cpu(count: int, subnet: int) -> tuple[float, float]:
        code, secret = start_class(teacher, lab.url)
        addresses = [f"127.{subnet}.{n // 250}.{n % 250 + 1}" for n in range(count)]
        result = {}

        async def flood():
            before = cpu_seconds(lab.process.pid)
            streams = await asyncio.gather(
                *(stream(lab.port, address, f"/api/classes/{code}/events") for address in addresses)
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                heard = [held.last("presence") or held.last("snapshot") or {} for held in streams]
                if all(data.get("connected") == count for data in heard):
                    break
                await asyncio.sleep(0.1)
            result["cpu"] = cpu_seconds(lab.process.pid) - before
            result["statuses"] = {held.status for held in streams}
            result["health"] = await asyncio.to_thread(timed_get, teacher, f"{lab.url}/api/health")
            result["settled"] = all((held.last("presence") or {}).get("connected") == count for held in streams)
            for held in streams:
                held.close()

        in_a_loop(flood())
        assert result["statuses"] == {200} and result["settled"], result
        assert result["health"][0] == 200 and result["health"][1] < 2, result["health"]
        teacher.delete(f"{lab.url}/api/classes/{code}", headers=secret)
        return result["cpu"] / count, result["health"][1]

    small, _ = per_stream_cpu(500, 1)
    large, health = per_stream_cpu(2000, 2)
    print(f"server CPU per stream: {small * 1000:.2f} ms at 500, {large * 1000:.2f} ms at 2,000; health {health:.3f} s")
    assert large < 2 * small


def test_streams_and_waiting_connections_never_take_the_places_kept_for_requests(small_lab):
    """64 connections, 16 kept: 60 streams from 60 addresses and 100 half-sent requests from one address
    leave room for another address's requests; the 49th stream is told there is no room (503), and the
    half-sent requests' longest-waiting ones are closed to make room."""
    lab = small_lab
    teacher = device("127.0.0.4")
    code, _ = start_class(teacher, lab.url)
    outcome = {}
    flood_open, done = threading.Event(), threading.Event()

    async def flood():
        streams = []
        for n in range(60):  # one after another: which ones get a place is then certain
            streams.append(await stream(lab.port, f"127.3.0.{n + 1}", f"/api/classes/{code}/events"))
        slow = [await half_sent(lab.port, "127.0.0.3") for _ in range(100)]
        outcome["streams"] = [held.status for held in streams]
        outcome["slow"] = await asyncio.gather(*(answered(held, 0.2) for held in slow))
        flood_open.set()
        await asyncio.to_thread(done.wait, 60)
        for held in [*streams, *slow]:
            held.close()

    flooder = threading.Thread(target=in_a_loop, args=(flood(),))
    flooder.start()
    try:
        assert flood_open.wait(60)
        times = served_within(lab.url, "127.0.0.2", 2.0)
    finally:
        done.set()
        flooder.join(60)
    streams, slow = outcome["streams"], outcome["slow"]
    print("streams", {s: streams.count(s) for s in set(streams)}, "slow", {s: slow.count(s) for s in set(slow)})
    print("health and analyze beside them, s:", [round(t, 3) for t in times])
    assert streams == [200] * 48 + [503] * 12
    assert slow.count(None) < 16  # still open: the rest were closed to make room


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(lab, small_lab):
    """By default nobody's X-Forwarded-For is believed, loopback's included (uvicorn's own default trusts
    it): one address starts at most 3 classes whatever it forwards. Behind the trusted proxy (127.0.0.5)
    each forwarded client has its own 3; an untrusted address forwarding the same gets its own bound only."""

    def started(url: str, address: str, forwarded: list[str]) -> list[int]:
        with device(address) as client:
            return [
                client.post(f"{url}/api/classes", headers={"X-Forwarded-For": name}).status_code for name in forwarded
            ]

    assert started(lab.url, "127.0.0.1", [f"10.0.0.{n}" for n in range(1, 6)]) == [201, 201, 201, 429, 429]
    proxied = started(small_lab.url, "127.0.0.5", ["10.0.1.1"] * 4 + ["9.9.9.9, 10.0.1.2"] * 3)
    assert proxied == [201, 201, 201, 429, 201, 201, 201]
    assert started(small_lab.url, "127.0.0.6", [f"10.0.2.{n}" for n in range(1, 5)]) == [201, 201, 201, 429]


def test_a_cookie_the_lab_did_not_sign_is_replaced_and_counts_as_none(lab):
    """A browser holds at most 6 class streams; a device that has 6 without a cookie gets no seventh by
    making a cookie up (it counts as none: the same browser), and is given a signed cookie instead."""
    code, _ = start_class(device("127.0.0.8"), lab.url)
    events = f"/api/classes/{code}/events"

    async def streams() -> list[int]:
        held = [await stream(lab.port, "127.0.0.9", events) for _ in range(6)]
        held.append(await stream(lab.port, "127.0.0.9", events, cookie="madeUpByMe12345"))
        for one in held:
            one.close()
        return [one.status for one in held]

    assert in_a_loop(streams()) == [200] * 6 + [429]
    forged = httpx.get(f"{lab.url}/api/health", headers={"Cookie": "lab_client=madeUpByMe12345"})
    signed = forged.cookies["lab_client"]
    assert signed != "madeUpByMe12345"
    again = httpx.get(f"{lab.url}/api/health", headers={"Cookie": f"lab_client={signed}"})
    assert "set-cookie" not in again.headers  # a signed cookie is kept


def test_a_signature_names_its_browser_and_nothing_else():
    secret, other = b"s" * 32, b"t" * 32
    cookie = f"browser1.{signature('browser1', secret)}"
    assert verified_browser(cookie, secret) == "browser1"
    assert verified_browser(cookie, other) == ""
    assert verified_browser(cookie.replace("browser1", "browser2", 1), secret) == ""
    assert verified_browser("browser1", secret) == verified_browser("", secret) == ""


def test_an_address_gathering_cookies_cannot_fill_the_queue():
    """Past max_waiting_per_address an address is refused (429) whatever cookies its requests carry, and
    another address still gets in line."""

    async def scenario():
        gate = PassGate(1, max_waiting=64, max_waiting_per_client=4, max_wait_seconds=10, max_waiting_per_address=8)
        release = asyncio.Event()

        async def request(client):
            async with gate.admit(client):
                await release.wait()

        running = asyncio.create_task(request(Client("10.0.0.9", "first")))
        await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(request(Client("10.0.0.9", f"cookie{n}"))) for n in range(8)]
        await asyncio.sleep(0.01)
        with pytest.raises(TooManyWaiting, match="this address already has 8 requests waiting"):
            async with gate.admit(Client("10.0.0.9", "cookie-new")):
                pass
        other = asyncio.create_task(request(Client("10.0.0.7")))
        await asyncio.sleep(0.01)
        assert gate.waiting == 9
        release.set()
        await asyncio.gather(running, *waiting, other)
        assert gate.waiting == 0 and gate.running == 0

    run_async(scenario())


def start(env: dict[str, str], command=("-m", "app")) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command, "--port", str(free_port())],
        env={**os.environ, **QUICK, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_uvicorn_without_the_labs_protocol_refuses_to_start_in_one_line():
    result = start({}, ("-m", "uvicorn", "app.main:app"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "attention-lab" in line] == [
        "ERROR:    attention-lab: serve the lab with its own HTTP protocol, which bounds connections per client: "
        "uvicorn app.main:app --http app.serving.server:LabProtocol (or python -m app)"
    ]


def test_memory_settings_past_the_machines_memory_stop_the_lab_in_one_line():
    result = start({"ATTENTION_LAB_MAX_STORE_BYTES": str(1024 * GIB)})
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"attention-lab: ATTENTION_LAB_MAX_STORE_BYTES={1024 * GIB} (1024.0 GiB) is more than ")
    assert line.endswith(" GiB)") and "this machine's memory" in line


def test_the_reserve_takes_at_most_half_of_what_the_machine_has_available():
    settings = Settings(reserve_bytes=4 * GIB, max_store_bytes=8 * GIB)
    assert reserve_size(settings, available=20 * GIB) == 4 * GIB
    assert reserve_size(settings, available=2 * GIB) == 1 * GIB
    assert (
        reserve_size(Settings(reserve_bytes=4 * GIB, max_store_bytes=8 * GIB, workers=2), available=8 * GIB) == 2 * GIB
    )
