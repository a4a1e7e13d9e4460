"""Releasing a sandbox's catch (docs/sandbox.md, "Release"): an app submits over the
submission port with smtplib, the owner releases the message through the API, and the
mailer hands it to a real SMTP next hop: the caught bytes exactly, behind a Resent-* block,
to the named addresses and no one else; a send like any other in its limits, its
suppression list, who may do it and each recipient's state."""
import re
import smtplib
from datetime import timedelta
from email.utils import parsedate_to_datetime

import pytest

from accounts.models import Account
from core.clock import db_now
from mailboxes.models import Message
from relay.models import OutboxMail, Suppression
from tests.accounts.test_identity import access_token
from tests.conftest import SmtpServerThread
from tests.helpers import create_mailbox, deliver
from tests.relay.inbound.test_submission import no_auth_failures  # noqa: F401 (a fixture)
from tests.relay.outbox.test_delivery import next_hop, send_all_pending, states  # noqa: F401 (a fixture)

# What an app submits: Alice in To, Carol in Cc, and (in the envelope only) a Bcc to the books.
CAUGHT = (b"From: Shop <shop@staging.example>\r\n"
          b"To: Alice <alice@customer.example>\r\n"
          b"Cc: carol@customer.example\r\n"
          b"Subject: Your receipt\r\n"
          b"Message-ID: <receipt-1@staging.example>\r\n"
          b"Date: Sat, 28 Nov 2026 10:00:00 +0000\r\n"
          b"MIME-Version: 1.0\r\n"
          b"Content-Type: text/plain; charset=utf-8\r\n"
          b"\r\n"
          b"Thanks for your order.\r\n"
          b".A line that starts with a dot.\r\n")
APP_ENVELOPE = ["alice@customer.example", "carol@customer.example", "books@staging.example"]


@pytest.fixture
def submission(transactional_db, no_auth_failures):
    server = SmtpServerThread(submission=True).start()
    yield server
    server.stop()


def caught(submission, sandbox: dict, raw: bytes = CAUGHT, recipients=APP_ENVELOPE) -> int:
    """Submit `raw` as an app would (AUTH on loopback), and the id of the sandbox's catch."""
    with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
        smtp.ehlo()
        smtp.user, smtp.password = sandbox["smtp"]["username"], sandbox["smtp"]["password"]
        smtp.auth("PLAIN", smtp.auth_plain)
        assert smtp.sendmail("shop@staging.example", recipients, raw) == {}
    return Message.objects.filter(mailbox_id=sandbox["id"]).latest("id").id


def release(client, sandbox: dict, message_id: int, to):
    return client.post(f"/api/v1/mailboxes/{sandbox['id']}/messages/{message_id}/release", {"to": to},
                       format="json")


def resent_block(received: bytes, raw: bytes) -> list[tuple[str, str]]:
    """The header lines `received` has before `raw`, which it must end with, unfolded."""
    assert received.endswith(raw)
    block = received[:len(received) - len(raw)].decode()
    return [(name, " ".join(value.split())) for name, value in re.findall(r"(?m)^([\w-]+):(.*(?:\r\n[ \t].*)*)\r\n",
                                                                           block)]


def test_a_release_sends_the_caught_bytes_behind_a_resent_block_to_the_named_addresses_only(
        client_pro, submission, next_hop):
    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    raw = client_pro.get(f"/api/v1/mailboxes/{sandbox['id']}/messages/{message_id}/raw").content
    assert raw == CAUGHT  # the catch is the app's bytes, as submitted

    response = release(client_pro, sandbox, message_id, ["qa@team.example", "Lead@Team.example"])
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and set(body) == {"id", "status", "message_id"}
    assert response["Location"] == f"/api/v1/mailboxes/{sandbox['id']}/outbox/{body['id']}"
    send_all_pending()

    [envelope] = next_hop.received
    assert envelope.rcpt_tos == ["qa@team.example", "Lead@Team.example"]
    assert set(next_hop.asked) == {"qa@team.example", "Lead@Team.example"}  # never Alice, Carol or the Bcc
    assert envelope.mail_from.startswith("bounces+")  # the signed Return-Path of every send
    block = resent_block(envelope.original_content, CAUGHT)
    assert [name for name, _ in block] == ["Resent-From", "Resent-To", "Resent-Date", "Resent-Message-ID"]
    values = dict(block)
    assert values["Resent-From"] == sandbox["address"]
    assert values["Resent-To"] == "qa@team.example, Lead@Team.example"
    assert abs(parsedate_to_datetime(values["Resent-Date"]) - db_now()) < timedelta(minutes=5)
    assert re.fullmatch(r"<[0-9a-f]{32}@%s>" % re.escape(sandbox["address"].split("@")[1]),
                        values["Resent-Message-ID"])

    # Tracked like any send: each recipient's state on the copy kept (direction out), in the catch's thread.
    mail = OutboxMail.objects.get(id=body["id"])
    assert states(mail) == {"qa@team.example": ("sent", 250), "Lead@Team.example": ("sent", 250)}
    copy = client_pro.get(f"/api/v1/mailboxes/{sandbox['id']}/messages/{body['message_id']}").json()
    assert copy["direction"] == "out" and copy["subject"] == "Your receipt"
    assert [row["status"] for row in copy["delivery"]] == ["sent", "sent"]
    assert copy["thread_id"] == client_pro.get(
        f"/api/v1/mailboxes/{sandbox['id']}/messages/{message_id}").json()["thread_id"]
    mail.refresh_from_db()
    assert mail.status == "sent" and mail.to == ["qa@team.example", "Lead@Team.example"] and mail.bcc == []


def test_many_addresses_fold_the_resent_to_line_and_every_one_is_in_the_envelope(client_pro, submission, next_hop):
    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    to = [f"reviewer-number-{n}@quality-assurance.team.example" for n in range(8)]
    assert release(client_pro, sandbox, message_id, to).status_code == 202
    send_all_pending()
    [envelope] = next_hop.received
    assert envelope.rcpt_tos == to
    head = envelope.original_content[:len(envelope.original_content) - len(CAUGHT)]
    assert all(len(line) <= 78 for line in head.split(b"\r\n"))
    assert dict(resent_block(envelope.original_content, CAUGHT))["Resent-To"] == ", ".join(to)


def test_a_message_written_with_bare_line_feeds_gets_its_block_in_the_same_line_ending(client_pro, next_hop):
    box = create_mailbox(client_pro)
    raw = b"From: a@example.com\nTo: b@example.com\nSubject: LF only\n\nBody\n"
    [message_id] = deliver(raw, box["address"])
    assert release(client_pro, box, message_id, ["qa@team.example"]).status_code == 202
    mail = OutboxMail.objects.get()
    assert bytes(mail.message).endswith(b"\n" + raw) and b"\r" not in bytes(mail.message)
    assert bytes(mail.message).startswith(f"Resent-From: {box['address']}\nResent-To: qa@team.example\n".encode())


# --- what is refused ----------------------------------------------------------------------------
@pytest.mark.parametrize("to, problem", [
    ([], "needs at least one address"),
    ([f"r{n}@example.com" for n in range(51)], "50"),
    (["not an address"], "must be an email address"),
    (["qa@team.example\r\nBcc: everyone@example.com"], "must be an email address"),
    (["qa@team.example>, <other@example.com"], "must be an email address"),
    ("", "must be an email address"),
    (None, ""),
])
def test_a_bad_to_is_400_naming_it_and_nothing_is_queued(client_pro, to, problem):
    box = create_mailbox(client_pro)
    [message_id] = deliver(CAUGHT, box["address"])
    response = release(client_pro, box, message_id, to)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_request" and problem in " ".join(response.json()["fields"]["to"])
    assert not OutboxMail.objects.exists()


def test_a_missing_field_or_an_unknown_one_is_400(client_pro):
    box = create_mailbox(client_pro)
    url = f"/api/v1/mailboxes/{box['id']}/messages/1/release"
    assert client_pro.post(url, {}, format="json").json()["fields"] == {"to": ["This field is required."]}
    unknown = client_pro.post(url, {"to": ["a@example.com"], "cc": ["b@example.com"]}, format="json")
    assert unknown.status_code == 400 and unknown.json()["fields"] == {"cc": ["Unknown field."]}


def test_an_unknown_message_and_another_owners_are_404(client_pro, make_client, submission):
    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    assert release(client_pro, sandbox, message_id + 1000, ["qa@team.example"]).status_code == 404
    mallory = make_client("mallory")
    theirs = release(mallory, sandbox, message_id, ["qa@team.example"])
    assert theirs.status_code == 404 and theirs.json()["code"] == "not_found"
    own = create_mailbox(mallory)
    assert release(mallory, own, message_id, ["qa@team.example"]).status_code == 404  # not in that mailbox
    assert not OutboxMail.objects.exists()
    assert release(client_pro, sandbox, message_id, ["qa@team.example"]).status_code == 202  # its owner may


def test_a_copy_of_mail_the_mailbox_sent_cannot_be_released(client_pro):
    box = create_mailbox(client_pro)
    sent = client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages",
                           {"to": ["ann@example.com"], "subject": "s", "text": "t"}, format="json").json()
    response = release(client_pro, box, sent["message_id"], ["qa@team.example"])
    assert response.status_code == 409 and response.json()["code"] == "conflict"
    assert "sent" in response.json()["message"]
    assert OutboxMail.objects.count() == 1


def test_an_anonymous_token_cannot_release(api, submission):
    sandbox = create_mailbox(api, sandbox=True)
    message_id = caught(submission, sandbox)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {sandbox['token']}")
    response = release(api, sandbox, message_id, ["qa@team.example"])
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert "API key" in response.json()["message"]
    assert not OutboxMail.objects.exists()


def test_an_access_token_needs_the_mail_send_scope(client_pro, submission):
    from rest_framework.test import APIClient

    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    agent = APIClient()
    token = access_token(Account.objects.get(login="alice"), expires_in=timedelta(hours=1))  # mailboxes, mail:read
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert agent.get(f"/api/v1/mailboxes/{sandbox['id']}/messages/{message_id}").status_code == 200
    response = release(agent, sandbox, message_id, ["qa@team.example"])
    assert response.status_code == 403
    assert response["WWW-Authenticate"] == 'Bearer realm="relay", error="insufficient_scope", scope="mail:send"'
    assert not OutboxMail.objects.exists()


def test_a_release_counts_toward_the_plans_sends_and_recipients(make_client, settings, submission):
    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS, "free": {**settings.RELAY_QUOTAS["free"], "sends_per_day": 2,
                                                                "recipients_per_send": 2}}
    client = make_client("frugal", "free")
    sandbox = create_mailbox(client, sandbox=True)
    message_id = caught(submission, sandbox)
    too_many = release(client, sandbox, message_id, ["a@team.example", "b@team.example", "c@team.example"])
    assert too_many.status_code == 429 and too_many.json()["code"] == "quota_exceeded"
    assert "recipients per send" in too_many.json()["message"]
    assert release(client, sandbox, message_id, ["a@team.example", "b@team.example"]).status_code == 202
    assert client.post(f"/api/v1/mailboxes/{sandbox['id']}/messages",
                       {"to": ["c@team.example"], "subject": "s", "text": "t"}, format="json").status_code == 202
    over = release(client, sandbox, message_id, ["a@team.example"])
    assert over.status_code == 429 and over.json()["code"] == "quota_exceeded" and "Retry-After" in over
    assert OutboxMail.objects.count() == 2


def test_a_suppressed_address_refuses_the_whole_release(client_pro, submission):
    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    Suppression.objects.create(account=Account.objects.get(login="alice"), address="gone@team.example",
                               reason="bounced", at=db_now())
    response = release(client_pro, sandbox, message_id, ["qa@team.example", "Gone@Team.example"])
    assert response.status_code == 422 and response.json()["code"] == "suppressed"
    assert "Gone@Team.example" in response.json()["message"]
    assert not OutboxMail.objects.exists()
    assert Message.objects.filter(mailbox_id=sandbox["id"]).count() == 1  # no copy kept either


def test_a_message_over_the_size_limit_once_resent_is_413(client_pro, submission, settings):
    sandbox = create_mailbox(client_pro, sandbox=True)
    message_id = caught(submission, sandbox)
    settings.RELAY_MAX_MESSAGE_BYTES = len(CAUGHT) + 20  # the catch fits; with its Resent-* block it does not
    response = release(client_pro, sandbox, message_id, ["qa@team.example"])
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    assert not OutboxMail.objects.exists()
