"""How a class's streams end: a teacher who has had no page open for the set time ends the class, and a
lab stopped with SIGTERM sends each of 100 open streams a last event and writes no traceback."""

import signal
import time

import pytest

from tests.class_client import Listener, device, start_class
from tests.conftest import LabProcess

pytestmark = pytest.mark.slow

AWAY_SECONDS = 2


@pytest.fixture
def lab(tmp_path, tiny_model_dir):
    lab = LabProcess(
        tmp_path,
        env={
            "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
            "ATTENTION_LAB_CLASS_TEACHER_AWAY_SECONDS": str(AWAY_SECONDS),
        },
    )
    lab.start()
    yield lab
    if lab.process.poll() is None:
        lab.stop()


def test_a_class_whose_teacher_is_away_ends_and_its_streams_hear_it(lab):
    teacher = device("127.0.16.1")
    code, _ = start_class(teacher, lab.url)
    url = f"{lab.url}/api/classes/{code}"
    teaching = Listener(f"{url}/events", "127.0.16.1", cookies=teacher.cookies).wait_ready()
    learner = Listener(f"{url}/events", "127.0.16.2").wait_ready()
    try:
        # While the teacher's page is open the class goes on, past the time away allowed.
        opened = time.monotonic()
        while time.monotonic() - opened < AWAY_SECONDS * 1.5:
            assert teacher.get(url).status_code == 200
            time.sleep(0.2)
        teaching.close()
        closed = time.monotonic()
        ended, at = learner.wait_for("ended", timeout=AWAY_SECONDS + 5)
        assert ended == {"reason": f"the teacher has had no page open for {AWAY_SECONDS / 60:g} minutes"}
        assert AWAY_SECONDS - 1 < at - closed < AWAY_SECONDS + 4
        assert learner.closed.wait(5) and teacher.get(url).status_code == 404
    finally:
        learner.close()
    # A class nobody opened a page of ends as well.
    other, _ = start_class(device("127.0.16.3"), lab.url)
    deadline = time.monotonic() + AWAY_SECONDS + 3
    while teacher.get(f"{lab.url}/api/classes/{other}").status_code == 200:
        assert time.monotonic() < deadline, "the class outlived its teacher's absence"
        time.sleep(0.1)


def test_sigterm_with_100_open_streams_sends_each_a_last_event_and_no_traceback(lab):
    teacher = device("127.0.17.1")
    code, secret = start_class(teacher, lab.url)
    teaching = Listener(f"{lab.url}/api/classes/{code}/events", "127.0.17.1", headers=secret).wait_ready()
    # Twenty devices with five streams each (within a browser's six), and the teacher's.
    streams = [teaching] + [
        Listener(f"{lab.url}/api/classes/{code}/events", f"127.0.17.{2 + n // 5}") for n in range(99)
    ]
    for stream in streams:
        stream.wait_ready()
    stopping = time.monotonic()
    lab.process.send_signal(signal.SIGTERM)
    for stream in streams:
        ended, _ = stream.wait_for("ended", timeout=10)
        assert ended == {"reason": "the lab stopped"}
        assert stream.closed.wait(5)
    lab.process.wait(timeout=30)  # uvicorn ends by the signal it was sent, once shut down
    assert time.monotonic() - stopping < 5  # the streams ended at once: no graceful-shutdown timeout to wait out
    log = lab.log.read_text()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log
    for stream in streams:
        stream.close()
