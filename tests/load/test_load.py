"""The short form of the classroom load test (`make load` runs 50 learners for 60 s): 10 learners for 5 s against a
live lab."""

import pytest

from tests.conftest import run_async
from tests.load.learners import simulate

pytestmark = pytest.mark.slow


def test_ten_learners_for_five_seconds(live_lab):
    report = run_async(simulate(live_lab.url, learners=10, seconds=5, server_pid=live_lab.process.pid))
    print(report)
    assert report["server_errors_other_than_503"] == 0, report["statuses"]
    assert report["transport_failures"] == {}
    assert report["statuses"].get(200, 0) >= 25  # everyone got answers, not only refusals
    assert report["by_kind"]["analyze"]["count"] >= 10
