"""Conversations (docs/api.md): sent mail kept, reply and forward, sending with cc, bcc,
reply_to, html and attachments (threads alone: tests/mailboxes/test_threads.py). Mail comes in over Relay's real SMTP server or
its storing path, goes out through the real sending code to a real SMTP sink, and the
replies are threaded by notmuch, a threading implementation Relay does not contain."""
import base64
import email
import json
import os
import shutil
import smtplib
import subprocess
from email import policy

import pytest

from mailboxes.models import Mailbox
from relay.outbox.send import batch_claim, batch_send
from tests.helpers import create_via_api, deliver, wait_until


def inbound(to: str, *, message_id: str, subject: str = "Confirm your sign-up", sender: str = "Bob <bob@other.test>",
            in_reply_to: str = "", references: str = "", cc: str = "", reply_to: str = "",
            body: str = "Your code is 493817.") -> bytes:
    headers = [f"From: {sender}", f"To: {to}", f"Subject: {subject}", f"Message-ID: <{message_id}>",
               "Date: Wed, 25 Nov 2026 10:00:00 +0000"]
    headers += [f"{name}: {value}" for name, value in
                (("In-Reply-To", in_reply_to), ("References", references), ("Cc", cc), ("Reply-To", reply_to)) if value]
    return ("\r\n".join(headers) + "\r\n\r\n" + body + "\r\n").encode()


@pytest.fixture
def smtp_out(settings, sink):
    """Sends what is queued through Django's SMTP backend to the sink, in this process (the
    mailer and worker processes are test_send.py's and the conversation test's)."""
    handler, port = sink
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""

    def send_all() -> list:
        claim, ids = batch_claim(limit=100)
        batch_send(claim=claim, mail_ids=ids)
        return handler.received

    return send_all


def box_of(client, **body) -> dict:
    response = create_via_api(client, **body)
    assert response.status_code == 201
    return response.json()


def reply(client, box, message_id, **body):
    return client.post(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/reply", {"text": "Confirmed.", **body},
                       format="json")


def forward(client, box, message_id, **body):
    return client.post(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/forward",
                       {"to": ["carol@elsewhere.test"], **body}, format="json")


def parsed(envelope) -> email.message.EmailMessage:
    return email.message_from_bytes(envelope.original_content, policy=policy.default)


def threads_of(client, box) -> list:
    return client.get(f"/api/v1/mailboxes/{box['id']}/threads").json()["results"]


def notmuch_threads(directory, raws: list[bytes]) -> list:
    """The threads notmuch makes of `raws`: each a tree of (Message-ID, [replies])."""
    if not shutil.which("notmuch"):
        pytest.skip("notmuch is not installed (scripts/test.sh installs it where it may)")
    maildir = directory / "mail"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    for number, raw in enumerate(raws):
        (maildir / "cur" / f"{number}.eml:2,S").write_bytes(raw)
    (directory / "config").write_text(f"[database]\npath={maildir}\n[new]\ntags=\n")
    env = {**os.environ, "NOTMUCH_CONFIG": str(directory / "config")}
    subprocess.run(["notmuch", "new", "--quiet"], env=env, check=True, timeout=60, capture_output=True)
    shown = subprocess.run(["notmuch", "show", "--format=json", "--body=false", "*"], env=env, check=True,
                           timeout=60, capture_output=True).stdout

    def tree(pairs):
        return [(message["id"], tree(replies)) for message, replies in pairs]

    return [tree(thread) for thread in json.loads(shown)]


# --- the conversation, end to end ----------------------------------------------------------
@pytest.mark.workers
def test_a_conversation_over_smtp_is_one_thread_in_order_and_notmuch_agrees(client_pro, smtp_server, sink,
                                                                             sending_worker, tmp_path):
    handler, _ = sink
    box = box_of(client_pro, local_part="agent")
    first = inbound(box["address"], message_id="m1@other.test")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.sendmail("bob@other.test", [box["address"]], first)
    received = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    assert [item["direction"] for item in received] == ["in"]

    answered = reply(client_pro, box, received[0]["id"])
    assert answered.status_code == 202, answered.json()
    wait_until(lambda: len(handler.received) == 1, timeout=30, message="the reply to reach the sink")
    delivered = handler.received[0]
    assert delivered.rcpt_tos == ["bob@other.test"]
    headers = parsed(delivered)
    assert headers["Subject"] == "Re: Confirm your sign-up"
    assert headers["In-Reply-To"] == "<m1@other.test>" and headers["References"] == "<m1@other.test>"
    reply_id = headers["Message-ID"].strip("<>")

    # The other side answers the reply, as a mail client would.
    third = inbound(box["address"], message_id="m3@other.test", subject="Re: Confirm your sign-up",
                    in_reply_to=f"<{reply_id}>", references=f"<m1@other.test> <{reply_id}>", body="Thanks!")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.sendmail("bob@other.test", [box["address"]], third)

    [thread] = threads_of(client_pro, box)
    assert thread["subject"] == "Confirm your sign-up" and thread["message_count"] == 3
    assert thread["unread_count"] == 2  # the two received, not opened yet; sent mail is never unread
    assert set(thread["participants"]) == {"bob@other.test", box["address"]}
    whole = client_pro.get(f"/api/v1/mailboxes/{box['id']}/threads/{thread['id']}").json()
    assert [(m["direction"], m["subject"]) for m in whole["messages"]] == [
        ("in", "Confirm your sign-up"), ("out", "Re: Confirm your sign-up"), ("in", "Re: Confirm your sign-up")]
    sent = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{whole['messages'][1]['id']}").json()
    assert sent["message_id"] == reply_id and sent["in_reply_to"] == "m1@other.test"
    assert sent["references"] == ["m1@other.test"] and sent["thread_id"] == thread["id"]
    assert sent["outbox_id"] == answered.json()["id"] and sent["outbox_status"] == "sent"

    # notmuch threads the three as first → reply → answer.
    assert notmuch_threads(tmp_path, [first, delivered.original_content, third]) == [
        [("m1@other.test", [(reply_id, [("m3@other.test", [])])])]]


# --- replies -------------------------------------------------------------------------------
def test_reply_all_answers_reply_to_and_copies_to_and_cc_but_never_the_mailbox(client_pro, smtp_out):
    box = box_of(client_pro)
    [mid] = deliver(inbound(f"{box['address']}, Ann <ann@other.test>", message_id="r@x.test",
                            subject="RE: Invoice", cc="carl@other.test, BOX <" + box["address"].upper() + ">",
                            reply_to="desk@other.test"), box["address"])
    assert reply(client_pro, box, mid, reply_all=True, html="<p>Confirmed.</p>").status_code == 202
    [delivered] = smtp_out()
    headers = parsed(delivered)
    assert headers["To"] == "desk@other.test" and headers["Cc"] == "ann@other.test, carl@other.test"
    assert headers["Subject"] == "RE: Invoice"  # not doubled
    assert sorted(delivered.rcpt_tos) == ["ann@other.test", "carl@other.test", "desk@other.test"]
    assert headers.get_body(("html",)).get_content().strip() == "<p>Confirmed.</p>"


def test_a_reply_to_a_message_of_another_mailbox_or_owner_is_404(client_pro, make_client):
    box, mine_too, = box_of(client_pro), box_of(client_pro)
    stranger = make_client("mallory")
    theirs = box_of(stranger)
    [mid] = deliver(inbound(theirs["address"], message_id="s@x.test"), theirs["address"])
    assert reply(client_pro, box, mid).status_code == 404
    assert forward(client_pro, box, mid).status_code == 404
    [mine] = deliver(inbound(box["address"], message_id="own@x.test"), box["address"])
    assert reply(client_pro, mine_too, mine).status_code == 404
    assert reply(stranger, box, mine).status_code == 404
    assert Mailbox.objects.get(id=box["id"]).outbound.count() == 0


def test_replies_and_forwards_need_an_api_key_and_count_toward_the_quotas(api, make_client, settings):
    anonymous = create_via_api(api).json()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {anonymous['token']}")
    [mid] = deliver(inbound(anonymous["address"], message_id="anon@x.test"), anonymous["address"])
    for refused in (reply(api, anonymous, mid), forward(api, anonymous, mid)):
        assert refused.status_code == 403 and "API key" in refused.json()["message"]

    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS, "free": {**settings.RELAY_QUOTAS["free"], "sends_per_day": 2,
                                                                "recipients_per_send": 2}}
    client = make_client("frugal", "free")
    box = box_of(client)
    [mid] = deliver(inbound(box["address"], message_id="q@x.test", cc="c1@other.test, c2@other.test"), box["address"])
    too_many = reply(client, box, mid, reply_all=True)  # bob, c1 and c2: three recipients
    assert too_many.status_code == 429 and too_many.json()["code"] == "quota_exceeded"
    assert reply(client, box, mid).status_code == 202
    assert forward(client, box, mid).status_code == 202
    over = reply(client, box, mid)
    assert over.status_code == 429 and over.json()["code"] == "quota_exceeded"


# --- sending, complete ----------------------------------------------------------------------
def test_attachments_arrive_byte_for_byte_and_bcc_only_in_the_envelope(client_pro, smtp_out):
    box = box_of(client_pro)
    binary, text = os.urandom(70_000), "line one\r\nline two\nno newline at the end ü".encode()
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages", {
        "to": ["ann@other.test"], "cc": ["carl@other.test"], "bcc": ["hidden@other.test"],
        "reply_to": "desk@example.com", "subject": "Files", "text": "Two files.", "html": "<b>Two files.</b>",
        "attachments": [
            {"filename": "data.bin", "content_type": "application/octet-stream",
             "content_base64": base64.b64encode(binary).decode()},
            {"filename": "notes ü.txt", "content_type": "text/plain", "content_base64": base64.b64encode(text).decode()},
        ]}, format="json")
    assert response.status_code == 202, response.json()
    [delivered] = smtp_out()
    assert sorted(delivered.rcpt_tos) == ["ann@other.test", "carl@other.test", "hidden@other.test"]
    assert b"hidden@other.test" not in delivered.original_content
    message = parsed(delivered)
    assert message["Cc"] == "carl@other.test" and message["Reply-To"] == "desk@example.com"
    files = {part.get_filename(): part.get_payload(decode=True) for part in message.iter_attachments()}
    assert files == {"data.bin": binary, "notes ü.txt": text}

    # Kept in the mailbox as sent mail, counted in its storage, filtered by direction.
    kept = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages?direction=out").json()["results"]
    assert [(m["direction"], m["subject"], m["has_attachments"]) for m in kept] == [("out", "Files", True)]
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages?direction=in").json()["count"] == 0
    assert Mailbox.objects.get(id=box["id"]).stored_bytes == kept[0]["size"]
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{kept[0]['id']}").json()
    assert detail["cc"] == "carl@other.test" and detail["reply_to"] == "desk@example.com"
    assert [a["filename"] for a in detail["attachments"]] == ["data.bin", "notes ü.txt"]


@pytest.mark.parametrize("attachment, field", [
    ({"filename": "a", "content_type": "text/plain", "content_base64": "not base64!"}, "content_base64"),
    ({"filename": "a", "content_type": "multipart/mixed", "content_base64": ""}, "content_type"),
    ({"filename": "a", "content_type": "nonsense", "content_base64": ""}, "content_type"),
    ({"filename": "a\r\nBcc: x@y.z", "content_type": "text/plain", "content_base64": ""}, "filename"),
    ({"filename": "a", "content_type": "text/plain", "content_base64": "", "extra": 1}, "extra"),
])
def test_a_malformed_attachment_is_a_400_naming_it(client_pro, attachment, field):
    box = box_of(client_pro)
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages", {
        "to": ["a@other.test"], "subject": "s", "text": "t", "attachments": [attachment]}, format="json")
    assert response.status_code == 400
    assert "attachments" in response.json()["fields"] and field in json.dumps(response.json()["fields"])


def test_a_message_over_the_size_limit_is_413_and_nothing_is_queued(client_pro, settings):
    settings.RELAY_MAX_MESSAGE_BYTES = 50_000
    box = box_of(client_pro)
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages", {
        "to": ["a@other.test"], "subject": "s", "text": "t", "attachments": [
            {"filename": "big", "content_type": "application/pdf",
             "content_base64": base64.b64encode(os.urandom(40_000)).decode()}]}, format="json")
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    mailbox = Mailbox.objects.get(id=box["id"])
    assert mailbox.outbound.count() == 0 and mailbox.message_count == 0 and mailbox.stored_bytes == 0


def test_sent_mail_is_not_what_a_wait_returns(client_pro):
    box = box_of(client_pro)
    client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages", {"to": ["a@other.test"], "subject": "s", "text": "t"},
                    format="json")
    waited = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages?wait=0")
    assert waited.status_code == 200 and waited.json()["results"] == []
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["count"] == 1


# --- forwards ------------------------------------------------------------------------------
def test_a_forward_attaches_the_original_byte_for_byte(client_pro, smtp_out):
    box = box_of(client_pro)
    # 8-bit bytes, a folded header and a line that starts with a dot: nothing may change.
    original = (b"From: Bob <bob@other.test>\r\nTo: " + box["address"].encode() + b"\r\nSubject: Fwd: Invoice\r\n"
                b"Message-ID: <inv@other.test>\r\nX-Long: one\r\n\ttwo\r\nContent-Type: text/plain; charset=latin-1\r\n"
                b"\r\nTotal: 12 \xe9\r\n.dot line\r\n")
    [mid] = deliver(original, box["address"])
    response = forward(client_pro, box, mid, text="See the invoice below.")
    assert response.status_code == 202, response.json()
    [delivered] = smtp_out()
    assert delivered.rcpt_tos == ["carol@elsewhere.test"]
    assert original in delivered.original_content
    message = parsed(delivered)
    assert message["Subject"] == "Fwd: Invoice"
    [attached] = [part for part in message.walk() if part.get_content_type() == "message/rfc822"]
    assert "See the invoice below." in message.get_body(("plain",)).get_content()
    [thread] = threads_of(client_pro, box)
    assert thread["message_count"] == 2 and attached.get_filename() == "forwarded.eml"
