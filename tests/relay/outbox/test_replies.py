"""Replies (relay/outbox/outbound.py) on their own: whom a reply goes to (`reply_recipients`)
and what `reply_queue` writes, as a mail client would (RFC 5322, section 3.6.4), for mail stored
by the same path SMTP uses."""
import pytest

from mailboxes.errors import InvalidRequest
from mailboxes.models import Direction, Message
from mailboxes.messages import recipient_by_address
from relay.ingest import message_ingest
from relay.models import OutboxMail
from relay.outbox.outbound import reply_queue, reply_recipients
from tests.helpers import create_mailbox
from tests.mail_corpus import crlf

OWN = "me@relay.localhost"


@pytest.fixture
def box(client_pro):
    return create_mailbox(client_pro, local_part="me")


def received(box, headers: str, direction: str = Direction.IN) -> Message:
    raw = crlf(f"{headers}\nSubject: Hello\nMessage-ID: <m{Message.objects.count()}@example.org>\n\nHi\n")
    [message_id] = message_ingest(raw=raw, mail_from="bounce@example.org", recipients=[recipient_by_address(OWN)],
                                   authentication={}, direction=direction)
    return Message.objects.select_related("content").get(id=message_id)


def test_a_reply_goes_to_the_reply_to_else_the_from(box):
    assert reply_recipients(received(box, f"From: A <a@example.org>\nTo: {OWN}"), OWN, reply_all=False) == (
        ["a@example.org"], [])
    with_reply_to = received(box, f"From: a@example.org\nReply-To: Desk <desk@example.org>\nTo: {OWN}")
    assert reply_recipients(with_reply_to, OWN, reply_all=False) == (["desk@example.org"], [])


def test_reply_all_adds_the_to_and_cc_but_never_the_mailbox_itself(box):
    message = received(box, f"From: a@example.org\nTo: {OWN}, b@example.org\nCc: c@example.org, ME@relay.localhost")
    assert reply_recipients(message, OWN, reply_all=True) == (["a@example.org"], ["b@example.org", "c@example.org"])


def test_a_reply_to_mail_the_mailbox_sent_goes_to_its_to_again(box):
    sent = received(box, f"From: {OWN}\nTo: friend@example.org", direction=Direction.OUT)
    assert reply_recipients(sent, OWN, reply_all=False) == (["friend@example.org"], [])


def test_a_message_with_no_usable_address_cannot_be_answered(box):
    message = received(box, f'From: "a\x0cb"@example.org\nTo: {OWN}')
    Message.objects.filter(id=message.id).update(envelope_from="")
    message.refresh_from_db()
    with pytest.raises(InvalidRequest) as refused:
        reply_recipients(message, OWN, reply_all=False)
    assert refused.value.field == "message_id"


def test_reply_queue_threads_the_answer_and_keeps_its_copy(box):
    from mailboxes.models import Mailbox

    original = received(box, f"From: a@example.org\nTo: {OWN}")
    mail = reply_queue(mailbox=Mailbox.objects.get(id=box["id"]), message_id=original.id, text="Thanks")
    assert mail.subject == "Re: Hello" and list(mail.to) == ["a@example.org"]
    sent = bytes(OutboxMail.objects.get(id=mail.id).message)
    assert f"In-Reply-To: <{original.message_id}>".encode() in sent
    kept = Message.objects.get(id=mail.kept_as_id)
    assert kept.direction == Direction.OUT and kept.thread_id == original.thread_id
