"""POST /mailboxes/{id}/messages: queued, sent by a real worker through Django's SMTP
email backend to a real SMTP sink, status visible to the owner."""
import pytest

from mailboxes.models import Mailbox
from tests.helpers import wait_until

pytestmark = pytest.mark.workers


def post(client, mailbox_id, **body):
    return client.post(f"/api/v1/mailboxes/{mailbox_id}/messages",
                       {"to": ["rcpt@example.com"], "subject": "Hi", "text": "Hello", **body}, format="json")


def outbox(client, mailbox_id, outbound_id) -> dict:
    return client.get(f"/api/v1/mailboxes/{mailbox_id}/outbox/{outbound_id}").json()


def test_a_queued_message_is_sent_through_the_sink_and_shows_sent(client_pro, sink, sending_worker):
    handler, _ = sink
    box = client_pro.post("/api/v1/mailboxes", {"local_part": "sender"}, format="json").json()
    response = post(client_pro, box["id"], html="<p>Hello</p>")
    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    outbound_id = response.json()["id"]
    wait_until(lambda: outbox(client_pro, box["id"], outbound_id)["status"] == "sent", timeout=30,
               message="the message to be sent")
    assert len(handler.received) == 1
    envelope = handler.received[0]
    # The Return-Path is the message's own signed bounce address (docs/delivery.md).
    assert envelope.mail_from.startswith("bounces+") and envelope.mail_from.endswith("@relay.localhost")
    assert envelope.rcpt_tos == ["rcpt@example.com"]
    assert b"Subject: Hi" in envelope.original_content and b"<p>Hello</p>" in envelope.original_content
    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/outbox").json()
    assert [item["status"] for item in listed["results"]] == ["sent"]


def test_a_temporary_refusal_is_retried_then_sent(client_pro, sink, sending_worker):
    handler, _ = sink
    handler.refuse = ["451 4.3.0 try later", "451 4.3.0 try later"]
    box = client_pro.post("/api/v1/mailboxes", {}, format="json").json()
    outbound_id = post(client_pro, box["id"]).json()["id"]
    wait_until(lambda: outbox(client_pro, box["id"], outbound_id)["status"] == "sent", timeout=60,
               message="the retried message to be sent")
    assert outbox(client_pro, box["id"], outbound_id)["attempts"] == 3
    assert len(handler.received) == 1


def test_a_permanent_refusal_fails_at_once(client_pro, sink, sending_worker):
    handler, _ = sink
    handler.refuse = ["554 5.7.1 no thanks"]
    box = client_pro.post("/api/v1/mailboxes", {}, format="json").json()
    outbound_id = post(client_pro, box["id"]).json()["id"]
    wait_until(lambda: outbox(client_pro, box["id"], outbound_id)["status"] == "failed", timeout=30,
               message="the message to fail")
    detail = outbox(client_pro, box["id"], outbound_id)
    assert detail["attempts"] == 1 and "554" in detail["last_error"]


def test_sending_from_an_expired_mailbox_is_410(client_pro, db):
    box = client_pro.post("/api/v1/mailboxes", {}, format="json").json()
    Mailbox.objects.filter(id=box["id"]).update(status="expired")
    response = post(client_pro, box["id"])
    assert response.status_code == 410 and response.json()["code"] == "expired"
