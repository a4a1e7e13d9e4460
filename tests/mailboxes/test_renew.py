"""Renewing a mailbox (docs/api.md, "Mailboxes"): expires_at from now, the plan's default
and bounds, and never a revival of one that has expired."""
from datetime import timedelta

import pytest

from mailboxes.models import Mailbox
from core.clock import db_now
from tests.helpers import earlier


@pytest.fixture
def mailbox_id(client_pro):
    return client_pro.post("/api/v1/mailboxes", {"ttl_ms": 600_000}, format="json").json()["id"]


def renew(client, mailbox_id, **body):
    return client.post(f"/api/v1/mailboxes/{mailbox_id}/renew", body, format="json")


def renewed_between(mailbox_id, before, after, ttl: timedelta) -> bool:
    """expires_at is the database's now, read during the renew, plus `ttl`."""
    return before + ttl <= Mailbox.objects.get(id=mailbox_id).expires_at <= after + ttl


def test_renew_on_active_mailbox_sets_expires_at_from_now(client_pro, mailbox_id):
    before = db_now()
    response = renew(client_pro, mailbox_id, ttl_ms=3_600_000)
    assert response.status_code == 200
    assert response.json()["status"] == "active"
    assert renewed_between(mailbox_id, before, db_now(), timedelta(hours=1))


def test_renew_without_ttl_uses_the_plan_default(client_pro, mailbox_id):
    before = db_now()
    renew(client_pro, mailbox_id)
    assert renewed_between(mailbox_id, before, db_now(), timedelta(hours=24))


def test_renew_on_expired_mailbox_is_410(client_pro, mailbox_id):
    earlier(Mailbox.objects.filter(id=mailbox_id), timedelta(minutes=11), "expires_at")
    response = renew(client_pro, mailbox_id, ttl_ms=600_000)
    assert response.status_code == 410
    assert response.json() == {"code": "expired", "message": "Mailbox has expired"}
    assert Mailbox.objects.get(id=mailbox_id).status == "expired"


def test_renew_on_another_owners_mailbox_is_404(make_client, mailbox_id):
    response = renew(make_client("mallory"), mailbox_id, ttl_ms=600_000)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("ttl", [299_999, 86_400_001, "600000", 1.5])
def test_renew_out_of_range_is_400(client_pro, mailbox_id, ttl):
    response = renew(client_pro, mailbox_id, ttl_ms=ttl)
    assert response.status_code == 400
    assert "ttl_ms" in response.json()["fields"]


def test_renew_cannot_revive_a_mailbox_expired_between_read_and_write(client_pro, mailbox_id):
    from mailboxes.errors import MailboxExpired
    from mailboxes.lifecycle import mailbox_renew

    mailbox = Mailbox.objects.get(id=mailbox_id)
    Mailbox.objects.filter(id=mailbox_id).update(status="expired")  # a sweep got there first
    with pytest.raises(MailboxExpired):
        mailbox_renew(mailbox=mailbox, plan="pro", ttl_ms=600_000)
    assert Mailbox.objects.get(id=mailbox_id).status == "expired"
