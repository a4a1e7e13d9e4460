"""What became of the mail Relay sends (docs/delivery.md): each recipient's state from what a
real SMTP next hop answered for it, bounces and complaints as Postfix, Exim, Microsoft 365,
Gmail and ARF write them, delivered over Relay's own SMTP server to the signed Return-Path,
forged and replayed ones, webhooks, and the suppression list."""
import smtplib
import threading
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from django.test import override_settings

from mailboxes.models import Message
from relay.models import OutboxMail, RecipientDelivery, Suppression
from relay.outbox import delivery
from relay.outbox.send import RetryableBatch, batch_claim, batch_send
from tests.ports import free_port
from tests.relay.outbox import bounce_corpus
from webhooks.models import WebhookDelivery


class NextHop:
    """An SMTP server answering each recipient by its local part: `slow` 451 the first time
    and 250 after, `gone` 550, anything else 250. Keeps each transaction's envelope."""

    def __init__(self) -> None:
        self.received: list = []
        self.asked: dict[str, int] = {}
        self.transactions = 0  # MAIL commands
        self.lock = threading.Lock()

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        with self.lock:
            self.transactions += 1
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.partition("@")[0]
        with self.lock:
            self.asked[address] = self.asked.get(address, 0) + 1
            times = self.asked[address]
        if local == "gone":
            return "550 5.1.1 <%s>: no such user" % address
        if local == "slow" and times == 1:
            return "451 4.7.1 greylisted, try again later"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.received.append(envelope)
        return "250 2.0.0 queued as 7F3A"


@pytest.fixture
def next_hop(settings):
    hop = NextHop()
    controller = Controller(hop, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    yield hop
    controller.stop()


def send(client, box, to, **body):
    response = client.post(f"/api/v1/mailboxes/{box['id']}/messages",
                           {"to": to, "subject": "Hello", "text": "Hi there", **body}, format="json")
    assert response.status_code == 202, response.content
    return OutboxMail.objects.get(id=response.json()["id"])


def states(mail) -> dict[str, tuple]:
    return {row.recipient: (row.status, row.smtp_code) for row in RecipientDelivery.objects.filter(mail=mail)}


def sent_copy(client, box, mail) -> dict:
    mail.refresh_from_db()
    return client.get(f"/api/v1/mailboxes/{box['id']}/messages/{mail.kept_as_id}").json()


def send_all_pending(again: bool = False):
    claim, ids = batch_claim(limit=10)
    return batch_send(claim=claim, mail_ids=ids, again=again)


@pytest.fixture
def sender_box(client_pro):
    return client_pro.post("/api/v1/mailboxes", {"local_part": "sender"}, format="json").json()


def subscribe(client, events):
    # Recorded, never delivered in these tests: a port nothing listens on.
    with override_settings(RELAY_WEBHOOK_ALLOW_PRIVATE=True):
        response = client.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/relay", "events": events},
                               format="json")
    assert response.status_code == 201, response.content


# --- what the next hop answered ------------------------------------------------------------------
def test_each_recipient_gets_what_the_next_hop_answered_and_a_retry_goes_only_to_the_deferred(
        client_pro, sender_box, next_hop):
    mail = send(client_pro, sender_box, ["ok@example.net", "slow@example.net"], cc=["gone@example.net"])
    assert set(states(mail).values()) == {("queued", None)}

    with pytest.raises(RetryableBatch):
        send_all_pending()
    assert states(mail) == {"ok@example.net": ("sent", 250), "slow@example.net": ("deferred", 451),
                            "gone@example.net": ("failed", 550)}
    assert next_hop.received[0].rcpt_tos == ["ok@example.net"]

    # The retry (as Celery's autoretry runs it: the same claim, again) asks only the deferred one.
    mail.refresh_from_db()
    assert batch_send(claim=mail.claim, mail_ids=[mail.id], again=True) == {"sent": 1}
    assert [envelope.rcpt_tos for envelope in next_hop.received] == [["ok@example.net"], ["slow@example.net"]]
    assert next_hop.asked == {"ok@example.net": 1, "slow@example.net": 2, "gone@example.net": 1}
    assert states(mail)["slow@example.net"] == ("sent", 250)
    mail.refresh_from_db()
    assert mail.status == "sent"

    shown = sent_copy(client_pro, sender_box, mail)["delivery"]
    assert [(row["recipient"], row["status"], row["smtp_code"]) for row in shown] == [
        ("ok@example.net", "sent", 250), ("slow@example.net", "sent", 250), ("gone@example.net", "failed", 550)]
    assert "no such user" in shown[2]["detail"] and shown[2]["at"]


def test_the_envelope_sender_is_a_signed_bounce_address_naming_that_message(client_pro, sender_box, next_hop):
    mail = send(client_pro, sender_box, ["ok@example.net"])
    send_all_pending()
    sender = next_hop.received[0].mail_from
    assert sender.startswith("bounces+") and sender.endswith("@relay.localhost")
    assert delivery.mail_of_bounce_address(sender) == mail.id
    # Another message's number under this one's MAC, or a changed MAC, names nothing.
    local, _, domain = sender.partition("@")
    number, _, mac = local.removeprefix("bounces+").partition(".")
    assert delivery.mail_of_bounce_address(f"bounces+{int(number, 16) + 1:x}.{mac}@{domain}") is None
    assert delivery.mail_of_bounce_address(f"bounces+{number}.{'0' * len(mac)}@{domain}") is None


def test_deferred_past_the_last_retry_is_failed(client_pro, sender_box, next_hop, settings):
    settings.RELAY_SEND_MAX_RETRIES = 0
    mail = send(client_pro, sender_box, ["slow@example.net"])
    assert send_all_pending() == {"failed": 1}
    status, code = states(mail)["slow@example.net"]
    assert (status, code) == ("failed", 451)
    assert "retries spent" in RecipientDelivery.objects.get(mail=mail).detail


def test_each_change_is_a_webhook_event_for_that_recipient(client_pro, sender_box, next_hop):
    subscribe(client_pro, ["message.sent", "message.deferred", "message.failed"])
    mail = send(client_pro, sender_box, ["ok@example.net", "slow@example.net", "gone@example.net"])
    with pytest.raises(RetryableBatch):
        send_all_pending()
    mail.refresh_from_db()
    events = sorted((row.event, row.payload["data"]["recipient"], row.payload["data"]["smtp_code"])
                    for row in WebhookDelivery.objects.all())
    assert events == [("message.deferred", "slow@example.net", 451), ("message.failed", "gone@example.net", 550),
                      ("message.sent", "ok@example.net", 250)]
    data = WebhookDelivery.objects.get(event="message.sent").payload["data"]
    assert data["mailbox_id"] == sender_box["id"] and data["message_id"] == mail.kept_as_id
    assert data["status"] == "sent" and data["detail"].startswith("250")


# --- bounces and complaints over Relay's SMTP ------------------------------------------------------
@pytest.fixture
def sent_to(client_pro, sender_box, next_hop, smtp_server):
    """send_to(*recipients): a message the next hop took, and its bounce address."""

    def sent(*recipients):
        mail = send(client_pro, sender_box, list(recipients))
        send_all_pending()
        return mail, next_hop.received[-1].mail_from

    return sent


def deliver(smtp_server, to: str, raw: bytes) -> None:
    """A bounce as a mail server returns it: a null sender, over SMTP."""
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        refused = smtp.sendmail("<>", [to], raw)
    assert refused == {}


@pytest.mark.parametrize("write, code", [
    (bounce_corpus.postfix, 550), (bounce_corpus.exim, None), (bounce_corpus.microsoft365, 550),
    (bounce_corpus.gmail, 550)])
def test_a_bounce_as_each_server_writes_it_marks_the_named_recipient_bounced(
        client_pro, sender_box, sent_to, smtp_server, write, code):
    mail, bounce_to = sent_to("nobody@example.net", "ok@example.net")
    stored_before = Message.objects.count()
    deliver(smtp_server, bounce_to, write(bounce_to, "nobody@example.net"))
    assert states(mail) == {"nobody@example.net": ("bounced", code), "ok@example.net": ("sent", 250)}
    assert Message.objects.count() == stored_before  # read, never stored
    suppressed = Suppression.objects.get()
    assert (suppressed.address, suppressed.reason, suppressed.message_id) == ("nobody@example.net", "bounced",
                                                                               mail.kept_as_id)


def test_a_delay_report_for_a_recipient_the_next_hop_took_changes_nothing(client_pro, sent_to, smtp_server):
    mail, bounce_to = sent_to("late@example.net")
    deliver(smtp_server, bounce_to, bounce_corpus.postfix_delayed(bounce_to, "late@example.net"))
    assert states(mail) == {"late@example.net": ("sent", 250)}


def test_a_complaint_marks_the_recipient_it_names_or_the_only_one(client_pro, sender_box, sent_to, smtp_server):
    subscribe(client_pro, ["message.complained"])
    mail, bounce_to = sent_to("reader@example.net", "other@example.net")
    deliver(smtp_server, bounce_to, bounce_corpus.arf(bounce_to, "reader@example.net"))
    assert states(mail) == {"reader@example.net": ("complained", None), "other@example.net": ("sent", 250)}
    only, only_to = sent_to("single@example.net")
    deliver(smtp_server, only_to, bounce_corpus.arf(only_to, None))
    assert states(only) == {"single@example.net": ("complained", None)}
    assert sorted(Suppression.objects.values_list("address", "reason")) == [
        ("reader@example.net", "complained"), ("single@example.net", "complained")]
    assert WebhookDelivery.objects.filter(event="message.complained").count() == 2


def test_a_forged_tag_is_taken_and_dropped(client_pro, sent_to, smtp_server):
    mail, bounce_to = sent_to("nobody@example.net")
    local, _, domain = bounce_to.partition("@")
    forged = f"{local[:-4]}abcd@{domain}" if not local.endswith("abcd") else f"{local[:-4]}dcba@{domain}"
    deliver(smtp_server, forged, bounce_corpus.postfix(forged, "nobody@example.net"))
    deliver(smtp_server, "bounces+1.000000000000000000000000@relay.localhost",
            bounce_corpus.postfix(forged, "nobody@example.net"))
    assert states(mail) == {"nobody@example.net": ("sent", 250)}
    assert not Suppression.objects.exists()


def test_a_tag_names_one_message_so_it_cannot_reach_another_accounts(make_client, client_pro, sender_box, sent_to,
                                                                     smtp_server, next_hop):
    theirs_client = make_client("bob")
    their_box = theirs_client.post("/api/v1/mailboxes", {"local_part": "bob"}, format="json").json()
    theirs = send(theirs_client, their_box, ["victim@example.net"])
    send_all_pending()
    mine, my_tag = sent_to("me@example.net")
    # Bob's recipient, named in a bounce to Alice's tag: Alice's message has no such recipient.
    deliver(smtp_server, my_tag, bounce_corpus.postfix(my_tag, "victim@example.net"))
    assert states(theirs) == {"victim@example.net": ("sent", 250)}
    assert states(mine) == {"me@example.net": ("sent", 250)}
    assert not Suppression.objects.exists()


def test_a_replayed_bounce_changes_nothing_more(client_pro, sender_box, sent_to, smtp_server):
    subscribe(client_pro, ["message.bounced"])
    mail, bounce_to = sent_to("nobody@example.net")
    bounce = bounce_corpus.postfix(bounce_to, "nobody@example.net")
    deliver(smtp_server, bounce_to, bounce)
    assert client_pro.delete("/api/v1/suppressions/nobody@example.net").status_code == 204
    deliver(smtp_server, bounce_to, bounce)
    assert states(mail) == {"nobody@example.net": ("bounced", 550)}
    assert WebhookDelivery.objects.filter(event="message.bounced").count() == 1
    assert not Suppression.objects.exists()  # the account's removal stands


def test_smtp_takes_any_bounce_address_and_mail_with_mailboxes_in_one_transaction(client_pro, sender_box, sent_to,
                                                                                  smtp_server):
    mail, bounce_to = sent_to("nobody@example.net")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.ehlo()
        smtp.mail("<>")
        assert smtp.rcpt("bounces+ffff.000000000000000000000000@relay.localhost")[0] == 250
        assert smtp.rcpt(bounce_to)[0] == 250
        assert smtp.rcpt(sender_box["address"])[0] == 250
        code, _ = smtp.data(bounce_corpus.postfix(bounce_to, "nobody@example.net"))
        assert code == 250
    assert states(mail) == {"nobody@example.net": ("bounced", 550)}
    assert Message.objects.filter(mailbox_id=sender_box["id"], direction="in").count() == 1


# --- suppression ---------------------------------------------------------------------------------
def test_a_suppressed_address_refuses_the_whole_send_until_removed(client_pro, sender_box, sent_to, smtp_server):
    mail, bounce_to = sent_to("nobody@example.net")
    deliver(smtp_server, bounce_to, bounce_corpus.postfix(bounce_to, "nobody@example.net"))
    queued = OutboxMail.objects.count()
    refused = client_pro.post(f"/api/v1/mailboxes/{sender_box['id']}/messages",
                              {"to": ["fine@example.net"], "bcc": ["NoBody@Example.NET"], "subject": "s", "text": "t"},
                              format="json")
    assert refused.status_code == 422
    assert refused.json()["code"] == "suppressed" and "NoBody@Example.NET" in refused.json()["message"]
    assert OutboxMail.objects.count() == queued
    listed = client_pro.get("/api/v1/suppressions").json()["results"]
    assert [(row["address"], row["reason"], row["message_id"]) for row in listed] == [
        ("nobody@example.net", "bounced", mail.kept_as_id)]
    assert client_pro.delete("/api/v1/suppressions/NOBODY@example.net").status_code == 204
    assert client_pro.delete("/api/v1/suppressions/nobody@example.net").status_code == 404
    send(client_pro, sender_box, ["nobody@example.net"])


def test_suppression_is_per_account(make_client, client_pro, sender_box, sent_to, smtp_server):
    mail, bounce_to = sent_to("nobody@example.net")
    deliver(smtp_server, bounce_to, bounce_corpus.postfix(bounce_to, "nobody@example.net"))
    other = make_client("carol")
    box = other.post("/api/v1/mailboxes", {}, format="json").json()
    send(other, box, ["nobody@example.net"])
    assert other.get("/api/v1/suppressions").json()["results"] == []


def test_a_bounce_that_comes_back_before_the_250_is_written_down_stands(client_pro, sender_box, next_hop):
    mail = send(client_pro, sender_box, ["nobody@example.net"])
    delivery.deliveries_record(mail, {"nobody@example.net": delivery.Answer("bounced", 550, "550 5.1.1 unknown")})
    send_all_pending()  # the next hop's 250, answered after it bounced
    assert states(mail) == {"nobody@example.net": ("bounced", 550)}


def test_a_stream_tells_every_change_when_one_send_has_more_recipients_than_a_page(client_pro, sender_box):
    from django.utils import timezone

    mail = send(client_pro, sender_box, ["first@example.net"])
    news = delivery.DeliveryNews(timezone.now() - timedelta(minutes=1))
    at = timezone.now()
    RecipientDelivery.objects.bulk_create([RecipientDelivery(mail=mail, recipient=f"r{n}@example.net", at=at)
                                           for n in range(delivery.DeliveryNews.PAGE + 50)])
    told = news.read(mail.mailbox_id)
    assert len(told) == delivery.DeliveryNews.PAGE + 50 + 1  # the send's own row too
    delivery.deliveries_record(mail, {"r7@example.net": delivery.Answer("failed", 550, "550 no")})
    assert [(row["recipient"], row["status"]) for row in news.read(mail.mailbox_id)] == [("r7@example.net", "failed")]
    assert news.read(mail.mailbox_id) == []


def test_a_bounce_with_raw_8bit_text_is_read(client_pro, sent_to, smtp_server):
    mail, bounce_to = sent_to("nobody@example.net")
    raw = bounce_corpus.postfix(bounce_to, "nobody@example.net").replace(
        b"User unknown in local recipient table", "Benutzer unbekannt \u00fc".encode())
    deliver(smtp_server, bounce_to, raw)
    status, code = states(mail)["nobody@example.net"]
    assert (status, code) == ("bounced", 550)
    assert "Benutzer unbekannt" in RecipientDelivery.objects.get(mail=mail).detail


class RefusingHelo(NextHop):
    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        return ["554 5.7.1 not you"]

    async def handle_HELO(self, server, session, envelope, hostname):
        return "554 5.7.1 not you"


def test_a_5xx_to_ehlo_fails_each_recipient_at_once_and_is_not_retried(client_pro, sender_box, settings):
    controller = Controller(RefusingHelo(), hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    try:
        mail = send(client_pro, sender_box, ["ok@example.net"])
        assert send_all_pending() == {"failed": 1}
    finally:
        controller.stop()
    assert states(mail) == {"ok@example.net": ("failed", 554)}


def test_a_retry_with_every_recipient_settled_by_a_bounce_sends_nothing(client_pro, sender_box, next_hop):
    mail = send(client_pro, sender_box, ["slow@example.net"])
    with pytest.raises(RetryableBatch):
        send_all_pending()
    delivery.deliveries_record(mail, {"slow@example.net": delivery.Answer("bounced", 550, "550 gone")})
    mail.refresh_from_db()
    assert batch_send(claim=mail.claim, mail_ids=[mail.id], again=True) == {"sent": 1}
    assert next_hop.asked == {"slow@example.net": 1} and next_hop.transactions == 1
