"""Domain checks that starve nobody (SECURITY.md, "Domains"): against a real web process
whose nameserver never answers, twelve verifies of one account at once leave another
account's calls as quick as ever, and the account's own are limited to a few a minute."""
import socket
import statistics
import threading
import time

import pytest
import requests

from accounts.services import account_create_with_key
from domains.services import VERIFIES_PER_MINUTE, domain_create
from core.clock import db_now
from tests.helpers import wait_until

pytestmark = pytest.mark.workers


@pytest.fixture
def silent_nameserver():
    quiet = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    quiet.bind(("127.0.0.1", 0))
    yield quiet.getsockname()[1]
    quiet.close()


def test_twelve_verifies_on_a_silent_nameserver_leave_another_accounts_calls_prompt(processes, silent_nameserver):
    base = processes.start_web(env={"RELAY_DNS_RESOLVERS": f"127.0.0.1:{silent_nameserver}",
                                    "RELAY_DNS_TIMEOUT_SECONDS": "2"})
    busy, busy_key = account_create_with_key(login="busy", plan="pro")
    _, other_key = account_create_with_key(login="other", plan="pro")
    domain = domain_create(owner=busy, name="silent-ns.test")
    other = requests.Session()
    other.headers["Authorization"] = f"Bearer {other_key}"
    assert other.get(f"{base}/api/v1/whoami", timeout=10).status_code == 200

    answers = []

    def verify():
        answers.append(requests.post(f"{base}/api/v1/domains/{domain.id}/verify", timeout=30,
                                     headers={"Authorization": f"Bearer {busy_key}"}))

    # The budget is counted per minute of the database's clock: the twelve start early in one.
    wait_until(lambda: db_now().second < 30, timeout=35, interval=0.2, message="the first half of a minute")
    verifies = [threading.Thread(target=verify) for _ in range(12)]
    for thread in verifies:
        thread.start()
    timings = []
    while any(thread.is_alive() for thread in verifies):
        started = time.monotonic()
        assert other.get(f"{base}/api/v1/whoami", timeout=10).status_code == 200
        timings.append(time.monotonic() - started)
        time.sleep(0.05)  # a steady trickle of the other account's calls, not a flood
    for thread in verifies:
        thread.join()

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * VERIFIES_PER_MINUTE + [429] * (12 - VERIFIES_PER_MINUTE), statuses
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.json()["code"] == "quota_exceeded" and int(refused.headers["Retry-After"]) > 0
    checked = next(answer for answer in answers if answer.status_code == 200).json()
    assert {record["status"] for record in checked["records"]} == {"unchecked"}
    assert max(timings) < 1.0, f"another account's slowest call took {max(timings):.2f} s"
    assert statistics.median(timings) < 0.25, f"another account's calls took {statistics.median(timings):.2f} s"
    assert len(timings) >= 10, "the verifies ended before the other account's calls were timed"
