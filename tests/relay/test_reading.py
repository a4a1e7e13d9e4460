"""Reading a mailbox (relay.reading), the entry every door calls: called directly, and as
docs/api.md's expiry table says the routes answer, every row, for the info routes and the
operational ones."""
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.identity import authenticate
from mailboxes.errors import InvalidRequest, MailboxExpired, NotFound
from mailboxes.models import CleanupState, Mailbox, MailboxStatus, Message
from core.clock import db_now
from relay import reading
from tests.helpers import deliver, earlier, make_mailbox


def test_mailbox_open_checks_ownership_then_life_then_the_cursor(db):
    from accounts.models import Account
    from accounts.credentials import api_key_create

    owner = Account.objects.create(email="reader@example.com", login="reader", status="active")
    stranger = Account.objects.create(email="other@example.com", login="other", status="active")
    caller = authenticate(api_key_create(account=owner)[1])
    other = authenticate(api_key_create(account=stranger)[1])
    mailbox = make_mailbox("reading-open", owner=owner)
    [message_id] = deliver(b"Subject: s\r\n\r\nhello\r\n", mailbox.address)

    assert reading.mailbox_open(caller=caller, mailbox_id=mailbox.id, after=message_id).id == mailbox.id
    with pytest.raises(NotFound):
        reading.mailbox_open(caller=other, mailbox_id=mailbox.id)
    with pytest.raises(InvalidRequest):
        reading.mailbox_open(caller=caller, mailbox_id=mailbox.id, after=message_id + 1000)
    Mailbox.objects.filter(id=mailbox.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(MailboxExpired):
        reading.mailbox_open(caller=caller, mailbox_id=mailbox.id)
    ended = reading.mailbox_open(caller=caller, mailbox_id=mailbox.id, live=False)
    assert ended.status == MailboxStatus.EXPIRED, "the due mailbox was not expired on the spot"


def test_messages_read_answers_from_the_matching_rows(db):
    mailbox = make_mailbox("reading-search")
    deliver(b"Subject: invoice\r\n\r\nyour invoice\r\n", mailbox.address)
    [wanted] = deliver(b"Subject: code\r\n\r\nyour code 4821\r\n", mailbox.address)
    with reading.messages_read(caller=None, mailbox=mailbox, search={"words": "code"}) as rows:
        found = [row.id for row in rows]
    assert found == [wanted]

INFO = ["get", "list"]
OPERATIONAL = ["messages", "message", "raw", "renew", "send", "delete_message"]


@pytest.fixture
def mailbox(client_pro):
    body = client_pro.post("/api/v1/mailboxes", {"local_part": "table", "ttl_ms": 600_000}, format="json").json()
    mailbox = Mailbox.objects.get(id=body["id"])
    [message_id] = deliver(b"Subject: s\r\n\r\nhello\r\n", mailbox.address)
    mailbox.message = Message.objects.get(id=message_id)
    return mailbox


def call(client, route, mailbox):
    base = f"/api/v1/mailboxes/{mailbox.id}"
    mid = mailbox.message.id
    if route == "get":
        return client.get(base)
    if route == "list":
        return client.get("/api/v1/mailboxes?include_expired=true")
    if route == "messages":
        return client.get(f"{base}/messages")
    if route == "message":
        return client.get(f"{base}/messages/{mid}")
    if route == "raw":
        return client.get(f"{base}/messages/{mid}/raw")
    if route == "delete_message":
        return client.delete(f"{base}/messages/{mid}")
    if route == "renew":
        return client.post(f"{base}/renew", {}, format="json")
    if route == "send":
        return client.post(f"{base}/messages", {"to": ["x@example.com"], "subject": "s", "text": "t"}, format="json")
    raise AssertionError(route)


def status_shown(response, mailbox) -> str:
    body = response.json()
    if "results" in body:
        body = next(m for m in body["results"] if m["id"] == str(mailbox.id))
    return body["status"]


@pytest.mark.parametrize("route", INFO)
def test_active_future_info_is_200_active(client_pro, mailbox, route):
    response = call(client_pro, route, mailbox)
    assert response.status_code == 200
    assert status_shown(response, mailbox) == "active"


NORMAL_STATUS = {"messages": 200, "message": 200, "raw": 200, "renew": 200, "send": 202, "delete_message": 204}


@pytest.mark.parametrize("route", OPERATIONAL)
def test_active_future_operational_is_normal(client_pro, mailbox, route):
    assert call(client_pro, route, mailbox).status_code == NORMAL_STATUS[route]


@pytest.mark.parametrize("route", INFO)
def test_active_past_info_expires_now_and_shows_expired(client_pro, mailbox, route):
    earlier(Mailbox.objects.filter(id=mailbox.id), timedelta(minutes=11), "expires_at")
    response = call(client_pro, route, mailbox)
    assert response.status_code == 200
    assert status_shown(response, mailbox) == "expired"
    mailbox.refresh_from_db()
    assert mailbox.status == "expired"
    assert mailbox.expired_at is not None
    assert mailbox.cleanup_state == "pending"


@pytest.mark.parametrize("route", OPERATIONAL)
def test_active_past_operational_expires_now_and_is_410(client_pro, mailbox, route):
    earlier(Mailbox.objects.filter(id=mailbox.id), timedelta(minutes=11), "expires_at")
    response = call(client_pro, route, mailbox)
    assert response.status_code == 410
    assert response.json() == {"code": "expired", "message": "Mailbox has expired"}
    mailbox.refresh_from_db()
    assert mailbox.status == "expired"
    assert mailbox.cleanup_state == "pending"


@pytest.mark.parametrize("route", INFO)
def test_expired_info_is_200_expired(client_pro, mailbox, route):
    Mailbox.objects.filter(id=mailbox.id).update(status="expired", expired_at=timezone.now())
    response = call(client_pro, route, mailbox)
    assert response.status_code == 200
    assert status_shown(response, mailbox) == "expired"


@pytest.mark.parametrize("route", OPERATIONAL)
def test_expired_operational_is_410_even_with_future_expires_at(client_pro, mailbox, route):
    Mailbox.objects.filter(id=mailbox.id).update(status="expired", expired_at=timezone.now())
    response = call(client_pro, route, mailbox)
    assert response.status_code == 410
    assert response.json()["code"] == "expired"


@pytest.mark.parametrize("route", INFO + OPERATIONAL)
def test_deleted_is_404_everywhere(client_pro, mailbox, route):
    assert client_pro.delete(f"/api/v1/mailboxes/{mailbox.id}").status_code == 204
    response = call(client_pro, route, mailbox)
    if route == "list":
        assert str(mailbox.id) not in [m["id"] for m in response.json()["results"]]
    else:
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "message": "Not found."}


def test_lazy_expiry_is_exact_to_the_instant(client_pro, mailbox):
    # By the database's clock: a moment before expires_at it is active; at it, expired.
    Mailbox.objects.filter(id=mailbox.id).update(expires_at=db_now() + timedelta(seconds=5))
    assert client_pro.get(f"/api/v1/mailboxes/{mailbox.id}").json()["status"] == "active"
    Mailbox.objects.filter(id=mailbox.id).update(expires_at=db_now())
    assert client_pro.get(f"/api/v1/mailboxes/{mailbox.id}").json()["status"] == "expired"


def test_lazy_expiry_ends_a_due_mailbox_once_and_owes_its_cleanup(db):
    due, live = make_mailbox("lazy-due", due=True), make_mailbox("lazy-live")
    assert reading.mailbox_lazy_expire(mailbox=live).status == MailboxStatus.ACTIVE
    ended = reading.mailbox_lazy_expire(mailbox=due)
    assert ended.status == MailboxStatus.EXPIRED and ended.cleanup_state == CleanupState.PENDING
    claim = Mailbox.objects.get(id=due.id).cleanup_claim
    assert claim is not None
    reading.mailbox_lazy_expire(mailbox=Mailbox.objects.get(id=due.id))
    assert Mailbox.objects.get(id=due.id).cleanup_claim == claim, "an ended mailbox was ended a second time"
