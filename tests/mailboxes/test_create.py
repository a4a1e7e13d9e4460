"""POST /api/v1/mailboxes: TTL rules per plan, addresses, conflicts, the backend."""
import threading

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from mailboxes.models import AddressReservation, Mailbox
from tests.helpers import create_via_api as create
from tests.stalwart_fake import HTTP_503, TIMEOUT, UNAUTHORIZED

MIN = 300_000
HOUR = 3_600_000
DAY = 24 * HOUR
CAPS = {"free": HOUR, "pro": DAY, "enterprise": 7 * DAY}


@pytest.mark.parametrize("plan", ["free", "pro", "enterprise"])
@pytest.mark.parametrize("offset, ok", [("min-1", False), ("min", True), ("cap", True), ("cap+1", False)])
def test_ttl_bounds_per_plan(make_client, plan, offset, ok):
    client = make_client(f"owner-{plan}", plan)
    ttl = {"min-1": MIN - 1, "min": MIN, "cap": CAPS[plan], "cap+1": CAPS[plan] + 1}[offset]
    response = create(client, ttl_ms=ttl)
    if ok:
        assert response.status_code == 201, response.json()
        body = response.json()
        lifetime = timezone.datetime.fromisoformat(body["expires_at"]) - timezone.datetime.fromisoformat(body["created_at"])
        assert abs(lifetime.total_seconds() * 1000 - ttl) < 2000
    else:
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_request"
        assert "ttl_ms" in response.json()["fields"]


@pytest.mark.parametrize("ttl", ["600000", 600000.5, 600000.0, True, None, [600000], {"v": 1}, 10**30, -5])
def test_non_integer_or_absurd_ttl_is_400(client_pro, ttl):
    response = create(client_pro, ttl_ms=ttl)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert "ttl_ms" in response.json()["fields"]


@pytest.mark.parametrize("plan, expected_ms", [("free", HOUR), ("pro", DAY), ("enterprise", DAY)])
def test_default_ttl_is_the_smaller_of_default_and_plan_cap(make_client, plan, expected_ms):
    response = create(make_client(f"o-{plan}", plan))
    assert response.status_code == 201
    mailbox = Mailbox.objects.get(id=response.json()["id"])
    assert abs((mailbox.expires_at - mailbox.created_at).total_seconds() * 1000 - expected_ms) < 2000


def test_plan_cap_never_exceeds_max_ttl_setting(make_client, settings):
    settings.RELAY_MAX_TTL_MS = 2 * HOUR
    client = make_client("ent", "enterprise")
    assert create(client, ttl_ms=2 * HOUR).status_code == 201
    assert create(client, ttl_ms=2 * HOUR + 1).status_code == 400


def test_local_part_is_lowercased_and_domain_defaults_to_first(client_pro):
    response = create(client_pro, local_part="Hello.World_1-x")
    assert response.status_code == 201
    assert response.json()["address"] == "hello.world_1-x@relay.localhost"
    assert response.json()["status"] == "active"
    assert response.json()["message_count"] == 0
    assert "token" not in response.json()


@pytest.mark.parametrize("local_part", ["", "a b", "x" * 65, "ünï", "a@b", "a+b", "../x", ".x", "x.", "a..b"])
def test_bad_local_part_is_400(client_pro, local_part):
    response = create(client_pro, local_part=local_part)
    assert response.status_code == 400
    assert "local_part" in response.json()["fields"]


@pytest.mark.parametrize("local_part", ["a b", "x" * 65, "ünï", "a@b", "a+b", "../x", ".x", "x.", "a..b"])
def test_the_service_refuses_a_bad_local_part_whichever_door_calls_it(db, local_part):
    from mailboxes.lifecycle import mailbox_create
    from mailboxes.errors import InvalidRequest
    from relay.backends import get_backend

    with pytest.raises(InvalidRequest) as refused:
        mailbox_create(backend=get_backend(), caller=None, local_part=local_part, domain=None, ttl_ms=None)
    assert refused.value.field == "local_part"
    assert not Mailbox.objects.exists() and not AddressReservation.objects.exists()


@pytest.mark.parametrize("local_part", ["postmaster", "abuse", "hostmaster", "webmaster", "admin", "Administrator"])
def test_role_addresses_are_refused(client_pro, local_part):
    response = create(client_pro, local_part=local_part)
    assert response.status_code == 400
    assert "reserved" in response.json()["fields"]["local_part"][0]


def test_reserved_local_parts_extend_the_role_list(client_pro, settings):
    settings.RELAY_RESERVED_LOCAL_PARTS = settings.RELAY_RESERVED_LOCAL_PARTS | {"billing"}
    assert create(client_pro, local_part="billing").status_code == 400
    assert create(client_pro, local_part="billing2").status_code == 201


def test_unknown_fields_are_400_naming_them(client_pro):
    response = create(client_pro, ttl=600_000)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["ttl"]
    assert not Mailbox.objects.exists()


def test_domain_must_be_configured(client_pro, settings):
    settings.RELAY_DOMAINS = ["relay.localhost", "other.localhost"]
    assert create(client_pro, domain="OTHER.localhost", local_part="a").json()["address"] == "a@other.localhost"
    response = create(client_pro, domain="gmail.com")
    assert response.status_code == 400
    assert "domain" in response.json()["fields"]


def test_random_local_part_when_absent(client_pro):
    first = create(client_pro).json()["address"]
    second = create(client_pro).json()["address"]
    assert first != second
    assert first.endswith("@relay.localhost")


def test_an_address_used_before_is_409_even_after_expiry_and_purge(client_pro):
    assert create(client_pro, local_part="once").status_code == 201
    response = create(client_pro, local_part="once")
    assert response.status_code == 409
    assert response.json() == {"code": "conflict", "message": "The address once@relay.localhost has already been used."}
    Mailbox.objects.filter(address="once@relay.localhost").update(status="expired", expired_at=timezone.now())
    assert create(client_pro, local_part="once").status_code == 409
    Mailbox.objects.filter(address="once@relay.localhost").delete()  # as the retention purge does
    assert create(client_pro, local_part="once").status_code == 409


@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_creates_of_one_address_give_one_201_and_one_409(make_client):
    clients = [make_client("racer-a"), make_client("racer-b")]
    for round_number in range(5):
        barrier = threading.Barrier(2)
        results = []

        def attempt(client):
            barrier.wait()
            try:
                results.append(create(client, local_part=f"race{round_number}").status_code)
            finally:
                connection.close()

        threads = [threading.Thread(target=attempt, args=(c,)) for c in clients]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        assert sorted(results) == [201, 409]
        assert Mailbox.objects.filter(address=f"race{round_number}@relay.localhost").count() == 1


def test_anonymous_create_returns_a_token_for_that_mailbox_only(api, client_pro):
    other = create(client_pro, local_part="owned").json()
    response = create(api)
    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith("rt_")
    anon = APIClient()
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert anon.get(f"/api/v1/mailboxes/{body['id']}").status_code == 200
    assert anon.get(f"/api/v1/mailboxes/{other['id']}").status_code == 404
    listed = anon.get("/api/v1/mailboxes").json()
    assert [m["id"] for m in listed["results"]] == [body["id"]]
    # The token is shown once and stored only as a hash.
    assert anon.get(f"/api/v1/mailboxes/{body['id']}").json().get("token") is None
    assert Mailbox.objects.get(id=body["id"]).token_hash != body["token"]


def test_anonymous_mailboxes_are_on_the_free_plan(api):
    assert create(api, ttl_ms=HOUR).status_code == 201
    assert create(api, ttl_ms=HOUR + 1).status_code == 400


def test_anonymous_creation_is_rate_limited_per_client_address(api, settings):
    from django.core.cache import cache

    cache.clear()
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"anon_create": "3/hour"}}

    def anonymous_create(address):
        return api.post("/api/v1/mailboxes", {}, format="json", REMOTE_ADDR=address)

    try:
        codes = [anonymous_create("10.0.0.1").status_code for _ in range(4)]
        assert codes == [201, 201, 201, 429]
        assert anonymous_create("10.0.0.1").json()["code"] == "rate_limited"
        assert anonymous_create("10.0.0.2").status_code == 201
    finally:
        cache.clear()


@pytest.mark.parametrize("failure", [HTTP_503, TIMEOUT, UNAUTHORIZED])
def test_backend_failure_is_503_shows_nothing_and_owes_a_deprovision(client_pro, stalwart, failure):
    stalwart.fail(failure)
    response = create(client_pro, local_part="unlucky")
    assert response.status_code == 503
    assert response.json()["code"] == "backend_unavailable"
    assert client_pro.get("/api/v1/mailboxes?include_expired=true").json()["count"] == 0
    # The row stays, invisible, owing a deprovision in case the backend made the account
    # after all (a timeout may hide a success); the address is never handed out again.
    row = Mailbox.objects.get(address="unlucky@relay.localhost")
    assert (row.status, row.cleanup_state) == ("deleted", "pending")
    assert AddressReservation.objects.filter(address="unlucky@relay.localhost").exists()
    stalwart.fail(failure, times=0)
    stalwart.failure_all = None
    assert create(client_pro, local_part="unlucky").status_code == 409


def test_create_provisions_the_principal_on_stalwart(client_pro, stalwart):
    response = create(client_pro, local_part="prov")
    assert response.status_code == 201
    mailbox = Mailbox.objects.get(id=response.json()["id"])
    assert stalwart.accounts[mailbox.backend_id] == {"name": "prov", "domainId": "d1",
                                                     "description": f"Relay disposable mailbox {mailbox.id}"}
