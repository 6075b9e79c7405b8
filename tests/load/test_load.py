"""The short form of the classroom load test: 10 learners for 10 s against a live lab."""

import pytest

from tests.conftest import run_async
from tests.load.learners import simulate

pytestmark = pytest.mark.slow


def test_ten_learners_for_ten_seconds(live_lab):
    report = run_async(simulate(live_lab.url, learners=10, seconds=10, server_pid=live_lab.process.pid))
    print(report)
    assert report["server_errors_other_than_503"] == 0, report["statuses"]
    assert report["transport_failures"] == {}
    assert report["statuses"].get(200, 0) >= 50  # everyone got answers, not only refusals
    assert report["by_kind"]["analyze"]["count"] >= 10
