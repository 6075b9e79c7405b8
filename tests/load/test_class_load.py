"""The short form of the class load test (`make class-load` runs 200 learners for 60 s): one teacher, 50
learners on event streams, 5 changes."""

import pytest

from tests.conftest import run_async
from tests.load.class_learners import simulate

pytestmark = pytest.mark.slow


def test_fifty_learners_receive_every_change_of_the_teacher(live_lab):
    report = run_async(simulate(live_lab.url, learners=50, seconds=5, server_pid=live_lab.process.pid))
    print(report)
    assert report["missed"] == 0 and report["connection_errors"] == 0
    assert report["deliveries"] == 50 * report["changes_sent"] >= 50 * 4
    assert report["p95_ms"] < 1000
