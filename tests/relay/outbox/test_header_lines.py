"""One rule for header lines in mail out (relay/outbox/build.py; SECURITY.md, "Mail
out"): no character any line breaker splits on gets into a header, through the API,
the MCP tools, the service itself or a reply to a stranger's Reply-To; a refused value is
a 400 (a tool error) naming its field, never a 500 and never a header line the sender
wrote, read at a real SMTP sink."""
import asyncio
import base64

import pytest

from mailboxes.errors import InvalidRequest
from mailboxes.mail_format import LINE_BREAKERS
from mailboxes.models import Mailbox
from relay.models import OutboxMail
from relay.outbox.outbound import Attachment, addresses, outbound_queue
from relay.outbox.build import mail_build
from tests.api.agents.test_mcp import call, error_of, mcp_http, mcp_web, owner  # noqa: F401 (fixtures)
from tests.domains.test_domains import add, publish
from tests.helpers import wait_until
from tests.mail_corpus import crlf, send

BREAKERS = [character for character in LINE_BREAKERS if character != "\x00"]


def post(client, mailbox_id, **body):
    return client.post(f"/api/v1/mailboxes/{mailbox_id}/messages",
                       {"to": ["rcpt@example.com"], "subject": "Hi", "text": "Hello", **body}, format="json")


@pytest.mark.parametrize("breaker", BREAKERS, ids=[f"U+{ord(c):04X}" for c in BREAKERS])
def test_a_subject_or_filename_with_a_line_breaker_is_a_400_naming_it(client_pro, box, breaker):
    response = post(client_pro, box["id"], subject=f"hi{breaker}From : ceo@bank.example")
    assert response.status_code == 400, response.content
    assert "subject" in response.json()["fields"]
    attachment = {"filename": f"a{breaker}From: ceo@bank.example", "content_type": "text/plain",
                  "content_base64": base64.b64encode(b"x").decode()}
    response = post(client_pro, box["id"], attachments=[attachment])
    assert response.status_code == 400, response.content
    assert OutboxMail.objects.count() == 0


@pytest.mark.parametrize("subject", ["hi\x0bX-A: b", "a\x0bb", "a\u2028b"])
def test_what_was_a_500_is_a_400_also_on_a_dkim_signing_domain(client_pro, dns, senders, subject):
    domain = add(client_pro, "signs.test").json()
    publish(dns, domain)
    assert client_pro.post(f"/api/v1/domains/{domain['id']}/verify").json()["status"] == "verified"
    box = client_pro.post("/api/v1/mailboxes", {"domain": "signs.test", "ttl_ms": 600_000}, format="json").json()
    response = post(client_pro, box["id"], subject=subject)
    assert response.status_code == 400, response.content
    assert "subject" in response.json()["fields"]


def test_the_service_refuses_them_whichever_door_called_it(client_pro, box):
    mailbox = Mailbox.objects.get(id=box["id"])
    for field, values in {
        "subject": {"subject": "hi\x1cFrom: x@example.com"},
        "to": {"to": ['"a\x0cb"@example.org']},
        "reply_to": {"reply_to": "a@example.org\x85Bcc: x@example.com"},
        "attachments": {"attachments": [Attachment(filename="a\u2029b", content_type="text/plain", content=b"x")]},
    }.items():
        arguments = {"to": ["rcpt@example.com"], "subject": "Hi", "text": "Hello", **values}
        with pytest.raises(InvalidRequest) as refused:
            outbound_queue(mailbox=mailbox, **arguments)
        assert refused.value.field == field
    with pytest.raises(InvalidRequest):
        mail_build(kind="send", to=["rcpt@example.com"], subject="Hi", text="x", headers={"X-A": "b\x0bX-B: c"})
    assert OutboxMail.objects.count() == 0


def test_addresses_from_received_mail_are_taken_strictly_or_skipped():
    assert addresses('"a\x0cb"@example.org, Real <real@example.org>') == ["real@example.org"]
    assert addresses('"a\r\nb"@example.org') == []
    found = addresses("x@example.org\x0bBcc: y@example.org, \"z\x1e\"@example.org")
    assert found and not any(character in address for address in found for character in LINE_BREAKERS + '"')


@pytest.mark.workers
def test_a_reply_to_a_hostile_reply_to_goes_to_the_sender_with_no_header_line_of_its_making(
        client_pro, box, smtp_server, sink, sending_worker):
    handler, _ = sink
    raw = crlf(f'From: Stranger <stranger@example.org>\nTo: {box["address"]}\n'
               'Reply-To: "a\x0cb"@example.org, "c\x0bBcc: d"@example.org\nSubject: Hello\n'
               'Message-ID: <hostile@example.org>\n\nHi\n')
    assert send(smtp_server.port, box["address"], raw, sender="stranger@example.org") == {}
    [message] = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages/{message['id']}/reply", {"text": "Thanks"},
                               format="json")
    assert response.status_code == 202, response.content
    wait_until(lambda: len(handler.received) == 1, timeout=30, message="the reply at the sink")
    envelope = handler.received[0]
    assert envelope.rcpt_tos == ["stranger@example.org"]
    head = envelope.original_content.split(b"\r\n\r\n", 1)[0]
    names = [line.split(b":", 1)[0].strip().lower() for line in head.split(b"\r\n") if not line[:1].isspace()]
    assert b"bcc" not in names and names.count(b"to") == 1
    assert b"\x0c" not in head and b"\x0b" not in head


@pytest.mark.workers
def test_the_mcp_send_tool_refuses_them_too(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            made = await call(session, "create_mailbox", {})
            return await error_of(session, "send_message", {"mailbox_id": made["id"], "to": ["rcpt@example.com"],
                                                             "subject": "hi\x0bFrom : ceo@bank.example",
                                                             "text": "x"})

    text = asyncio.run(scenario())
    assert text.startswith("invalid_request") and "subject" in text, text
    assert OutboxMail.objects.count() == 0
