"""Revocation is immediate on every web process (docs/api.md, "Keys and revocation"), and
one caller cannot hold the web processes' capacity with open waits (RELAY_MAX_OPEN_WAITS).

Two separate gunicorn processes share the database and Redis, as two machines would: a
key deleted through one, an account suspended or a recovery done elsewhere, is refused by
the other on the very next request, and an event stream opened with the key ends."""
import threading
import time

import pytest
import redis
import requests
from django.conf import settings
from django.core.management import call_command

from accounts.models import Account, TokenAction
from accounts.services import account_create_with_key, recovery_confirm, token_issue
from tests.helpers import answers, wait_until

pytestmark = pytest.mark.workers


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def two_webs(processes):
    first, second = (processes.start_web(name, wait=False) + "/api/v1" for name in ("web1", "web2"))
    processes.wait_ready()
    _, key = account_create_with_key(login="owner", plan="pro")
    for base in (first, second):
        wait_until(lambda: answers(f"{base}/whoami", headers=bearer(key), status=200),
                   timeout=30, message=f"{base} to answer")
    return first, second, key


def second_key(base: str, key: str) -> dict:
    response = requests.post(f"{base}/keys", headers=bearer(key), json={}, timeout=10)
    assert response.status_code == 201
    return response.json()


def warm(base: str, key: str) -> None:
    """A few requests with the key, so the process has it cached."""
    for _ in range(3):
        assert requests.get(f"{base}/whoami", headers=bearer(key), timeout=5).status_code == 200


def test_a_key_deleted_through_one_process_is_refused_by_another_on_the_next_request(two_webs):
    first, second, key = two_webs
    spare = second_key(first, key)
    warm(second, spare["api_key"])
    assert requests.delete(f"{first}/keys/{spare['id']}", headers=bearer(key), timeout=10).status_code == 204
    response = requests.get(f"{second}/whoami", headers=bearer(spare["api_key"]), timeout=5)
    assert response.status_code == 401 and response.json()["code"] == "unauthorized"
    assert requests.get(f"{second}/whoami", headers=bearer(key), timeout=5).status_code == 200


def test_a_suspension_is_refused_by_every_process_on_the_next_request(two_webs):
    first, second, key = two_webs
    warm(first, key)
    warm(second, key)
    call_command("account", "suspend", "owner")  # a shell on a third machine
    for base in (first, second):
        response = requests.get(f"{base}/whoami", headers=bearer(key), timeout=5)
        assert response.status_code == 403 and response.json()["code"] == "account_suspended"
    call_command("account", "unsuspend", "owner")
    assert requests.get(f"{second}/whoami", headers=bearer(key), timeout=5).status_code == 200


def test_a_recovery_shuts_out_the_keys_it_replaces_on_every_process(two_webs):
    first, second, key = two_webs
    warm(second, key)
    Account.objects.filter(login="owner").update(email="owner@example.com")
    issued = token_issue(account=Account.objects.get(login="owner"), action=TokenAction.KEY_RECOVERY)
    _, new_key = recovery_confirm(link_token=issued.link_token, code=issued.code)
    assert requests.get(f"{second}/whoami", headers=bearer(key), timeout=5).status_code == 401
    assert requests.get(f"{second}/whoami", headers=bearer(new_key), timeout=5).status_code == 200


def test_an_event_stream_opened_with_a_key_ends_when_the_key_is_deleted(two_webs):
    first, second, key = two_webs
    spare = second_key(first, key)
    box = requests.post(f"{first}/mailboxes", headers=bearer(spare["api_key"]), json={}, timeout=10).json()
    ended = threading.Event()
    lines: list[str] = []

    def listen() -> None:
        with requests.get(f"{second}/mailboxes/{box['id']}/events", headers=bearer(spare["api_key"]),
                          stream=True, timeout=60) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines(decode_unicode=True):
                lines.append(line)
        ended.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    wait_until(lambda: ": connected" in lines, timeout=10, message="the stream to open")
    deleted_at = time.monotonic()
    assert requests.delete(f"{first}/keys/{spare['id']}", headers=bearer(key), timeout=10).status_code == 204
    # Well within one heartbeat (15 s): the revocation wakes the stream.
    # Woken by the revocation, not by the next heartbeat: the bound is far below 15 s.
    assert ended.wait(10), "the stream went on after its key was deleted"
    assert time.monotonic() - deleted_at < 10
    assert not any(line.startswith("event: message") for line in lines)


def test_a_held_wait_is_refused_once_its_key_is_deleted(two_webs):
    first, second, key = two_webs
    spare = second_key(first, key)
    box = requests.post(f"{first}/mailboxes", headers=bearer(spare["api_key"]), json={}, timeout=10).json()
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(requests.get(
        f"{second}/mailboxes/{box['id']}/messages", params={"wait": 30}, headers=bearer(spare["api_key"]),
        timeout=60)))
    waiter.start()
    held = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    account = Account.objects.get(login="owner")
    wait_until(lambda: held.zcard(f"relay:open-waits:account:{account.pk}") == 1, timeout=10, message="the wait held")
    started = time.monotonic()
    requests.delete(f"{first}/keys/{spare['id']}", headers=bearer(key), timeout=10)
    waiter.join(20)
    assert answers and answers[0].status_code == 401
    assert time.monotonic() - started < 20  # refused on revocation, not at the end of the 30 s wait


# --- RELAY_MAX_OPEN_WAITS --------------------------------------------------------------------
def test_one_key_cannot_hold_more_open_streams_than_the_cap(processes):
    """The attack: one client opens stream after stream until the web process has no room
    for anyone else. Past the cap it gets 429, and the streams it has stay open."""
    base = processes.start_web(env={"RELAY_MAX_OPEN_WAITS": "2"}, wait=False) + "/api/v1"
    processes.wait_ready()
    _, key = account_create_with_key(login="greedy", plan="pro")
    wait_until(lambda: answers(f"{base}/whoami", headers=bearer(key), status=200),
               timeout=30, message="the web process")
    box = requests.post(f"{base}/mailboxes", headers=bearer(key), json={}, timeout=10).json()
    url = f"{base}/mailboxes/{box['id']}/events"
    first = requests.get(url, headers=bearer(key), stream=True, timeout=30)
    second = requests.get(url, headers=bearer(key), stream=True, timeout=30)
    assert first.status_code == second.status_code == 200
    refused = requests.get(url, headers=bearer(key), timeout=10)
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    wait = requests.get(f"{base}/mailboxes/{box['id']}/messages", params={"wait": 5}, headers=bearer(key), timeout=10)
    assert wait.status_code == 429
    # Another key is not affected, and the open streams go on.
    _, other = account_create_with_key(login="patient", plan="pro")
    other_box = requests.post(f"{base}/mailboxes", headers=bearer(other), json={}, timeout=10).json()
    assert requests.get(f"{base}/mailboxes/{other_box['id']}/messages", params={"wait": 0},
                        headers=bearer(other), timeout=10).status_code == 200
    assert next(first.iter_lines(decode_unicode=True)) == ": connected"
    # Closing one gives its place back.
    second.close()
    wait_until(lambda: requests.get(f"{base}/mailboxes/{box['id']}/messages", params={"wait": 0},
                                    headers=bearer(key), timeout=10).status_code == 200,
               timeout=10, message="the closed stream's place to come back")
    first.close()


def test_an_accounts_keys_share_one_cap_on_open_waits(processes):
    """Five keys of one account are one caller: making keys does not multiply the cap."""
    base = processes.start_web(env={"RELAY_MAX_OPEN_WAITS": "2"}, wait=False) + "/api/v1"
    processes.wait_ready()
    _, key = account_create_with_key(login="many-keys", plan="pro")
    wait_until(lambda: answers(f"{base}/whoami", headers=bearer(key), status=200),
               timeout=30, message="the web process")
    keys = [key] + [second_key(base, key)["api_key"] for _ in range(2)]
    box = requests.post(f"{base}/mailboxes", headers=bearer(key), json={}, timeout=10).json()
    url = f"{base}/mailboxes/{box['id']}/events"
    streams = [requests.get(url, headers=bearer(keys[i]), stream=True, timeout=30) for i in range(2)]
    assert [stream.status_code for stream in streams] == [200, 200]
    refused = requests.get(url, headers=bearer(keys[2]), timeout=10)
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    for stream in streams:
        stream.close()
