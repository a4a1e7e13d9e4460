"""Safe on the internet (the attack findings): rate limits that a forged header cannot
dodge and that hold across processes, no spam cannon, quotas per plan, and the odd
inputs that used to leak reprs or keep dead tokens alive."""
import json
import re
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from django.test import RequestFactory
from django.utils import timezone
from rest_framework.request import Request

from accounts.models import Account
from api.authentication import AccountRouteThrottle, AnonymousCreateThrottle
from mailboxes.models import Mailbox
from relay.models import OutboxMail as OutboundMessage
from relay.outbox.send import batch_claim, batch_send
from tests.helpers import create_via_api, free_port


@pytest.fixture
def anon_rate(settings):
    """Set the anonymous creation rate for this test, on a clean rate-limit store."""
    def set_rate(rate: str) -> None:
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK,
                                   "DEFAULT_THROTTLE_RATES": {"anon_create": rate}}
    cache.clear()
    yield set_rate
    cache.clear()


def test_a_forged_x_forwarded_for_does_not_dodge_the_rate_limit(api, anon_rate):
    anon_rate("3/hour")
    codes = [api.post("/api/v1/mailboxes", {}, format="json", REMOTE_ADDR="198.51.100.7",
                      HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(10)]
    assert codes == [201] * 3 + [429] * 7


def test_behind_one_trusted_proxy_the_client_is_the_last_x_forwarded_for_entry(api, anon_rate, settings):
    anon_rate("2/hour")
    settings.RELAY_TRUSTED_PROXIES = 1

    def create(forwarded_for: str) -> int:
        return api.post("/api/v1/mailboxes", {}, format="json", REMOTE_ADDR="10.0.0.1",
                        HTTP_X_FORWARDED_FOR=forwarded_for).status_code

    # What a client puts in front of the proxy's own entry does not matter.
    assert [create(f"1.1.1.{i}, 203.0.113.5") for i in range(3)] == [201, 201, 429]
    assert create("203.0.113.6") == 201


@pytest.mark.workers
def test_the_rate_limit_holds_across_web_processes(processes):
    port = free_port()
    processes.web("web", port, workers=3, env={"RELAY_ANON_CREATE_RATE": "5/hour"})
    processes.wait_ready()
    codes = []
    for _ in range(15):  # new connections, spread over the three workers
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/mailboxes", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            codes.append(urllib.request.urlopen(request, timeout=10).status)
        except urllib.error.HTTPError as error:
            codes.append(error.code)
    assert codes.count(201) == 5 and codes.count(429) == 10


# --- sending ---------------------------------------------------------------------------
def send(client, mailbox_id, to=("x@example.com",), subject="s"):
    return client.post(f"/api/v1/mailboxes/{mailbox_id}/messages", {"to": list(to), "subject": subject, "text": "t"},
                       format="json")


def test_an_anonymous_mailbox_token_cannot_send(api):
    body = create_via_api(api).json()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    response = send(api, body["id"])
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden" and "API key" in response.json()["message"]
    assert not OutboundMessage.objects.exists()


def test_sends_per_day_are_a_quota_with_retry_after(make_client, settings):
    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS, "free": {**settings.RELAY_QUOTAS["free"], "sends_per_day": 2}}
    client = make_client("frugal", "free")
    mailbox = create_via_api(client).json()
    assert [send(client, mailbox["id"]).status_code for _ in range(3)] == [202, 202, 429]
    refused = send(client, mailbox["id"])
    assert refused.json()["code"] == "quota_exceeded"
    assert 86_000 < int(refused["Retry-After"]) <= 86_400
    assert OutboundMessage.objects.count() == 2


def test_recipients_per_send_are_a_quota(make_client, settings):
    limit = settings.RELAY_QUOTAS["free"]["recipients_per_send"]
    client = make_client("few", "free")
    mailbox = create_via_api(client).json()
    too_many = [f"r{i}@example.com" for i in range(limit + 1)]
    response = send(client, mailbox["id"], to=too_many)
    assert response.status_code == 429 and response.json()["code"] == "quota_exceeded" and response["Retry-After"]
    assert send(client, mailbox["id"], to=too_many[:limit]).status_code == 202


def test_active_mailboxes_are_a_quota_and_retry_after_is_the_soonest_expiry(make_client, settings):
    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS, "free": {**settings.RELAY_QUOTAS["free"], "active_mailboxes": 2}}
    client = make_client("small", "free")
    first = create_via_api(client, ttl_ms=600_000).json()
    create_via_api(client, ttl_ms=3_000_000)
    refused = create_via_api(client)
    assert refused.status_code == 429 and refused.json()["code"] == "quota_exceeded"
    assert 590 <= int(refused["Retry-After"]) <= 600
    assert client.delete(f"/api/v1/mailboxes/{first['id']}").status_code == 204
    assert create_via_api(client).status_code == 201


def test_a_subject_with_a_line_break_is_400_not_a_failed_send(client_pro):
    mailbox = create_via_api(client_pro).json()
    response = send(client_pro, mailbox["id"], subject="hello\r\nBcc: victim@example.com")
    assert response.status_code == 400 and "subject" in response.json()["fields"]


def test_a_send_queued_before_its_mailbox_ended_is_not_sent(client_pro, mailoutbox):
    mailbox = create_via_api(client_pro).json()
    queued = send(client_pro, mailbox["id"]).json()
    Mailbox.objects.filter(id=mailbox["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    claim, ids = batch_claim(limit=10)
    assert ids == [queued["id"]]
    assert batch_send(claim=claim, mail_ids=ids) == {"failed": 1}
    assert mailoutbox == []
    assert "expired" in OutboundMessage.objects.get(id=queued["id"]).last_error


# --- odd inputs ------------------------------------------------------------------------
def test_validation_errors_on_list_fields_are_plain_strings(client_pro):
    mailbox = create_via_api(client_pro).json()
    response = send(client_pro, mailbox["id"], to=["fine@example.com", "not an address"])
    assert response.status_code == 400
    messages = response.json()["fields"]["to"]
    assert all(isinstance(m, str) and "ErrorDetail" not in m and "{" not in m for m in messages)
    assert any("item 1" in m for m in messages)


def test_a_deleted_mailboxs_token_no_longer_authenticates(api):
    body = create_via_api(api).json()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert api.get("/api/v1/whoami").status_code == 200
    assert api.delete(f"/api/v1/mailboxes/{body['id']}").status_code == 204
    assert api.get("/api/v1/whoami").status_code == 401


@pytest.mark.parametrize("value", ["5.5e306", "banana", "2", "yes!"])
def test_include_expired_takes_true_or_false_only(client_pro, value):
    response = client_pro.get(f"/api/v1/mailboxes?include_expired={value}")
    assert response.status_code == 400 and "include_expired" in response.json()["fields"]


@pytest.mark.parametrize("query", ["page=abc", "page=0", "page_size=-1", "page_size=x", "page=²", "page_size=²",
                                   "page=" + "9" * 25])
def test_malformed_pagination_is_400_naming_the_parameter(client_pro, query):
    response = client_pro.get(f"/api/v1/mailboxes?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.json()["fields"]


def test_deeply_nested_json_is_400_even_with_debug_on(client_pro, settings):
    settings.DEBUG = True
    response = client_pro.generic("POST", "/api/v1/mailboxes", ("[" * 50_000 + "]" * 50_000).encode(),
                                  "application/json")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["code"] == "invalid_request"


def test_the_api_docs_load_nothing_from_another_site(api):
    page = api.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert not re.search(r"""(src|href)=["']https?://""", page)


def test_listing_expires_a_long_due_list_in_batches(client_pro, django_assert_max_num_queries):
    from relay import reading

    owner = Account.objects.get(login="alice")
    due = timezone.now() - timedelta(seconds=1)
    Mailbox.objects.bulk_create([Mailbox(owner=owner, address=f"due{i}@relay.localhost", expires_at=due)
                                 for i in range(reading.LAZY_EXPIRE_BATCH * 2 + 10)])
    body = client_pro.get("/api/v1/mailboxes?include_expired=true&page_size=200").json()
    assert body["count"] == reading.LAZY_EXPIRE_BATCH * 2 + 10
    assert not Mailbox.objects.filter(status="active").exists()
    assert {m["status"] for m in body["results"]} == {"expired"}


def test_every_way_a_mailbox_ends_gives_its_quota_slot_back(make_client, settings, stalwart):
    from accounts.models import Account as Owner
    from tests.stalwart_fake import HTTP_503

    client = make_client("counted", "pro")
    owner = Owner.objects.get(login="counted")
    live = [create_via_api(client).json() for _ in range(3)]
    assert Owner.objects.get(id=owner.id).live_mailboxes == 3
    client.delete(f"/api/v1/mailboxes/{live[0]['id']}")  # deleted
    Mailbox.objects.filter(id=live[1]["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    client.get(f"/api/v1/mailboxes/{live[1]['id']}")  # expired on the spot
    stalwart.fail(HTTP_503)
    settings.RELAY_BACKEND = "stalwart"
    assert create_via_api(client).status_code == 503  # never provisioned
    assert Owner.objects.get(id=owner.id).live_mailboxes == 1
    assert Mailbox.objects.filter(owner=owner, status__in=["provisioning", "active"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_cannot_both_take_the_last_slot(settings):
    import threading

    from django.db import connection
    from rest_framework.test import APIClient

    from accounts.services import account_create_with_key

    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS, "free": {**settings.RELAY_QUOTAS["free"], "active_mailboxes": 3}}
    _, key = account_create_with_key(login="racer", plan="free")
    start, codes = threading.Barrier(8), []

    def create() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        start.wait(10)
        try:
            codes.append(create_via_api(client).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create) for _ in range(8)]
    [thread.start() for thread in threads]
    [thread.join(30) for thread in threads]
    assert sorted(codes) == [201] * 3 + [429] * 5


@pytest.mark.parametrize("resume", ["²", "٣", "-1", "9" * 25])
def test_a_malformed_last_event_id_is_400_naming_it(client_pro, box, resume):
    response = client_pro.get(f"/api/v1/mailboxes/{box['id']}/events", HTTP_LAST_EVENT_ID=resume)
    assert response.status_code == 400
    assert "Last-Event-ID" in response.json()["fields"]


@pytest.mark.parametrize("scope", ["signup", "anon_create"])
def test_tries_at_once_from_one_address_pass_a_limit_exactly(db, settings, scope):
    """Sixteen tries released together, in four rounds from four addresses: each round passes
    exactly the limit's five, however the threads interleave."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], scope: "5/hour"}}
    cache.clear()
    throttle_class = AnonymousCreateThrottle if scope == "anon_create" else AccountRouteThrottle
    tries = 16
    for round_number in range(4):
        start = threading.Barrier(tries)

        def attempt(_):
            request = Request(RequestFactory().post("/", REMOTE_ADDR=f"198.51.100.{round_number + 20}"))
            start.wait(timeout=30)
            throttle = throttle_class()
            allowed = throttle.allow_request(request, SimpleNamespace(throttle_scope=scope))
            return allowed, throttle.wait()

        with ThreadPoolExecutor(tries) as pool:
            answers = list(pool.map(attempt, range(tries)))
        assert [allowed for allowed, _ in answers].count(True) == 5, f"round {round_number}: {answers}"
        assert all(0 < wait <= 3600 for allowed, wait in answers if not allowed)
