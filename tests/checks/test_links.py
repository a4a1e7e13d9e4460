"""The link check: a Celery task's HEAD (then GET) of each link, redirects judged again,
10 s a link, a few at once, against a loopback HTTP server with routes of each kind."""
import re
import threading
import time

import pytest
import requests
import yaml
from django.db import connection, transaction

from accounts.services import account_create_with_key
from checks import links
from checks.models import LinkCheck
from mailboxes.models import Message
from tests import mail_corpus
from tests.helpers import ROOT, deliver, wait_until
from tests.link_site import Site


@pytest.fixture
def site():
    running = Site()
    yield running
    running.stop()


@pytest.fixture
def allow_private(settings):
    settings.RELAY_LINK_CHECK_ALLOW_PRIVATE = True


def linking(*urls: str):
    return lambda to: mail_corpus.newsletter(to, links=list(urls))


def run_check(message_id: int) -> dict:
    """The task's work, in this process, for the newest request (as the worker runs it)."""
    check = LinkCheck.objects.get(message_id=message_id)
    links.links_check_run(message_id, check.started_at.isoformat())
    return {result["url"]: result for result in LinkCheck.objects.get(message_id=message_id).links}


def start(client_pro, box, message_id: int):
    return client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links")


def test_each_kind_of_answer(client_pro, box, received, site, allow_private):
    urls = [f"{site.url}/ok", f"{site.url}/missing", f"{site.url}/moved", f"{site.url}/no-head", f"{site.url}/loop"]
    message_id = received(linking(*urls))
    response = start(client_pro, box, message_id)
    assert response.status_code == 202 and response.json() == {"status": "pending", "links": []}
    found = run_check(message_id)
    assert found[f"{site.url}/ok"] == {"url": f"{site.url}/ok", "status_code": 200, "final_url": f"{site.url}/ok",
                                       "redirects": 0, "error": None, "ok": True}
    assert found[f"{site.url}/missing"]["status_code"] == 404 and not found[f"{site.url}/missing"]["ok"]
    moved = found[f"{site.url}/moved"]
    assert (moved["status_code"], moved["final_url"], moved["redirects"], moved["ok"]) == (200, f"{site.url}/ok", 1,
                                                                                           True)
    assert found[f"{site.url}/no-head"]["ok"] and site.hits[("GET", "/no-head")] == 1
    loop = found[f"{site.url}/loop"]
    assert loop["error"] == "more than 5 redirects" and loop["redirects"] == 5 and not loop["ok"]
    assert site.hits[("HEAD", "/loop")] == 6
    answer = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links").json()
    assert answer["status"] == "done" and [link["url"] for link in answer["links"]] == urls


def test_a_body_is_not_read(client_pro, box, received, site, allow_private):
    # HEAD refused, so a GET, whose body never ends: the answer is its status line.
    message_id = received(linking(f"{site.url}/endless"))
    start(client_pro, box, message_id)
    started = time.monotonic()
    found = run_check(message_id)
    assert found[f"{site.url}/endless"]["ok"] and found[f"{site.url}/endless"]["status_code"] == 200
    assert time.monotonic() - started < 5


def test_ten_seconds_a_link_and_five_at_once(client_pro, box, received, site, allow_private):
    slow = [f"{site.url}/slow?{index}" for index in range(5)]
    message_id = received(linking(*slow, f"{site.url}/ok"))
    start(client_pro, box, message_id)
    started = time.monotonic()
    found = run_check(message_id)
    elapsed = time.monotonic() - started
    assert all(found[url]["error"] == "no answer within 10 s" and found[url]["status_code"] is None
               for url in slow), found
    assert found[f"{site.url}/ok"]["ok"]
    # Five links of 10 s each, side by side: one bound, not five (and not less than one).
    assert 10 <= elapsed < 20, elapsed


def test_private_addresses_are_refused_and_never_contacted(client_pro, box, received, site, settings):
    settings.RELAY_LINK_CHECK_ALLOW_PRIVATE = False
    message_id = received(linking(f"{site.url}/ok", f"{site.url}/moved"))
    start(client_pro, box, message_id)
    found = run_check(message_id)
    assert all(not result["ok"] and "does not resolve to a public address" in result["error"]
               for result in found.values())
    assert sum(site.hits.values()) == 0


def test_every_redirect_is_judged_again(client_pro, box, received, site, settings, monkeypatch):
    # This site counts as public and a second, on 127.0.0.2, as private: the check follows
    # a redirect from the first to the second no further than the address rule.
    from core import http as core_http

    inner = Site("127.0.0.2")
    try:
        settings.RELAY_LINK_CHECK_ALLOW_PRIVATE = False
        monkeypatch.setattr(core_http, "public", lambda address: str(address) == "127.0.0.1")
        url = f"{site.url}/elsewhere?to={inner.url}/ok"
        message_id = received(linking(url))
        start(client_pro, box, message_id)
        result = run_check(message_id)[url]
        assert result["redirects"] == 1 and result["final_url"] == f"{inner.url}/ok"
        assert "does not resolve to a public address" in result["error"] and not result["ok"]
        assert site.hits[("HEAD", "/elsewhere")] == 1 and sum(inner.hits.values()) == 0
    finally:
        inner.stop()


def test_at_most_fifty_links(client_pro, box, received, site, allow_private):
    message_id = received(linking(*(f"{site.url}/ok?{index}" for index in range(60))))
    start(client_pro, box, message_id)
    found = run_check(message_id)
    assert len(found) == 50 and all(result["ok"] for result in found.values())


def test_asking_again_while_a_check_runs_queues_nothing_more(client_pro, box, received, site, allow_private,
                                                             monkeypatch, django_capture_on_commit_callbacks):
    message_id = received(linking(f"{site.url}/ok"))
    queued = []
    monkeypatch.setattr(links, "_queue", lambda message, started_at: queued.append(started_at))
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            assert start(client_pro, box, message_id).json()["status"] == "pending"
    assert len(queued) == 1, "each POST while pending sent the links another round of requests"


@pytest.mark.django_db(transaction=True)
def test_two_requests_at_the_same_moment_queue_one_check(client_pro, box, received, site, allow_private, monkeypatch):
    message = Message.objects.get(id=received(linking(f"{site.url}/ok")))
    queued, answers = [], []
    monkeypatch.setattr(links, "_queue", lambda message_id, started_at: queued.append(started_at))

    def second_request():
        try:
            answers.append(links.links_check_start(message))
        finally:
            connection.close()

    with transaction.atomic():
        links.links_check_start(message)  # the first request, not committed yet
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            first = cursor.fetchone()[0]
        second = threading.Thread(target=second_request)
        second.start()
        wait_until(lambda: _waiting_on(first), timeout=10, message="the second request to wait for the first")
    second.join(10)
    assert not second.is_alive() and len(answers) == 1
    assert len(queued) == 1, "both requests queued a check: the links' sites were asked twice"
    assert answers[0].started_at == queued[0] == LinkCheck.objects.get(message=message).started_at


def _waiting_on(pid: int) -> bool:
    """Whether a session waits for a lock `pid` holds (pg_locks is read live, not from the
    transaction's snapshot of the statistics)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND %s = ANY(pg_blocking_pids(pid))", [pid])
        return cursor.fetchone()[0] > 0


def test_a_newer_request_replaces_the_older_result(client_pro, box, received, site, allow_private):
    message_id = received(linking(f"{site.url}/ok"))
    start(client_pro, box, message_id)
    older = LinkCheck.objects.get(message_id=message_id).started_at
    run_check(message_id)
    start(client_pro, box, message_id)  # done: a new check starts
    assert LinkCheck.objects.get(message_id=message_id).started_at > older
    # The first request's task, delivered again late, keeps nothing over the newer request.
    links.links_check_run(message_id, older.isoformat())
    assert LinkCheck.objects.get(message_id=message_id).status == "pending"


def test_a_check_never_started_is_not_found(client_pro, box, received):
    message_id = received(mail_corpus.plain)
    response = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links")
    assert response.status_code == 404 and "POST" in response.json()["message"]


def test_a_check_whose_task_was_lost_is_queued_again(client_pro, box, received, monkeypatch,
                                                     django_capture_on_commit_callbacks):
    message_id = received(mail_corpus.plain)
    start(client_pro, box, message_id)
    long_ago = LinkCheck.objects.get(message_id=message_id).started_at.replace(year=2020)
    LinkCheck.objects.filter(message_id=message_id).update(started_at=long_ago)
    queued = []
    monkeypatch.setattr(links, "_queue", lambda message, started_at: queued.append((message, started_at)))
    with django_capture_on_commit_callbacks(execute=True):
        answer = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links").json()
    renewed = LinkCheck.objects.get(message_id=message_id).started_at
    assert answer["status"] == "pending" and renewed > long_ago and queued == [(message_id, renewed)]


def test_a_worker_of_the_links_queue_checks_the_links_end_to_end(processes, site):
    """POST → 202, a real Celery worker's task, GET → done: over a live web process. The
    worker takes the `links` queue alone: link checks wait behind nothing else's tasks."""
    processes.env["RELAY_LINK_CHECK_ALLOW_PRIVATE"] = "true"
    processes.worker("links", queues="links")
    base = processes.start_web()
    _, key = account_create_with_key(login="linker", plan="pro")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {key}"
    box = http.post(f"{base}/api/v1/mailboxes", json={"ttl_ms": 600_000}, timeout=10).json()
    message_id = deliver(mail_corpus.newsletter(box["address"], links=[f"{site.url}/ok", f"{site.url}/missing"]),
                         box["address"])[0]
    route = f"{base}/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links"
    assert http.post(route, timeout=10).status_code == 202
    done = wait_until(lambda: (answer := http.get(route, timeout=10).json())["status"] == "done" and answer,
                      timeout=30, message="the worker's link check")
    assert [(link["url"], link["ok"]) for link in done["links"]] == [(f"{site.url}/ok", True),
                                                                     (f"{site.url}/missing", False)]


def test_the_shipped_processes_take_the_link_check_queue_on_a_worker_of_its_own():
    """docker-compose.yml and scripts/run.sh: one worker for `links` alone, the others for
    the rest; a worker started without -Q (the suite's) takes every queue, links too."""
    from django.conf import settings

    from core import task_names

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    workers = {name: service["command"] for name, service in compose.items()
               if service.get("command", [])[:4] == ["celery", "-A", "config", "worker"]}
    assert {name: command[command.index("-Q") + 1] for name, command in workers.items()} == {
        "worker": "celery,sweep", "links": "links"}
    run = (ROOT / "scripts" / "run.sh").read_text()
    assert re.findall(r"celery -A config worker -Q (\S+)", run) == ["celery,sweep", "links"]
    assert {queue.name for queue in settings.CELERY_TASK_QUEUES} == {"celery", "sweep", "links"}
    assert settings.CELERY_TASK_ROUTES[task_names.CHECK_LINKS] == {"queue": "links"}
