"""The expiry engine's distributed tests (tests/expiry/workers.py) on Redis as the broker:
the xdist worker's own Redis, so this file may run beside any other."""
import pytest

from tests.expiry.workers import RedisBroker
# The tests themselves, collected here with this file's broker, in the order they are written.
from tests.expiry.workers import test_two_worker_processes_given_one_cleanup_deprovision_once  # noqa: F401
from tests.expiry.workers import test_many_workers_and_two_beats_clean_up_a_thousand_mailboxes_promptly  # noqa: F401
from tests.expiry.workers import test_a_worker_killed_mid_run_loses_no_cleanup  # noqa: F401
from tests.expiry.workers import test_a_broker_that_loses_every_message_loses_no_cleanup  # noqa: F401

pytestmark = pytest.mark.workers


@pytest.fixture
def on_broker(processes, broker):
    return RedisBroker(broker, processes)
