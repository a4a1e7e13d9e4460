"""Replies and forwards (docs/api.md): a send whose recipients, subject and headers come
from a message of the same mailbox (RFC 5322, 3.6.4), kept in its thread."""
import uuid
from email.mime.base import MIMEBase
from email.utils import getaddresses


from mailboxes import queries
from mailboxes.errors import InvalidRequest
from mailboxes.models import Direction, Mailbox, Message
from mailboxes.mail_format import FORWARD_PREFIX, REPLY_PREFIX, header, lineage_of
from relay.models import OutboxMail
from relay.outbox import header_lines
from relay.outbox.outbound import Attachment, outbound_queue

MAX_SUBJECT = 998


def addresses(*values: str) -> list[str]:
    """The plain local@domain addresses in headers' values, each once, in order; anything a
    stranger wrote that Relay could not write back is skipped."""
    found: dict[str, str] = {}
    for _, address in getaddresses([value for value in values if value]):
        if header_lines.strict_address(address):
            found.setdefault(address.lower(), address)
    return list(found.values())


def subject_with(prefix: str, pattern, subject: str) -> str:
    """`prefix` + subject, unless it already starts with one like it (not doubled), on
    one line."""
    subject = " ".join(subject.split())
    return (subject if pattern.match(subject) else f"{prefix} {subject}".rstrip())[:MAX_SUBJECT]


def reply_recipients(original: Message, own: str, *, reply_all: bool) -> tuple[list[str], list[str]]:
    """To and Cc of a reply to `original`: its Reply-To or From (its To if the mailbox sent
    it), with `reply_all` its To and Cc too, never the mailbox itself."""
    if original.direction == Direction.OUT:
        to = addresses(original.to_header)
    else:
        to = addresses(header(original.content.headers, "Reply-To")) or addresses(original.from_header,
                                                                                     original.envelope_from)[:1]
    to = [address for address in to if address.lower() != own]
    cc = []
    if reply_all:
        taken = {address.lower() for address in to} | {own}
        cc = [address for address in addresses(original.to_header, original.cc_header) if address.lower() not in taken]
    if not to and cc:
        to, cc = cc[:1], cc[1:]
    if not to:
        raise InvalidRequest("The message has no address to reply to.", field="message_id")
    return to, cc


def reply_queue(*, mailbox: Mailbox, message_id: int, text: str, html: str = "", reply_all: bool = False,
                attachments: list[Attachment] = ()) -> OutboxMail:
    """Reply to message `message_id` of `mailbox` (NotFound for any other's)."""
    original = queries.message_get(mailbox=mailbox, message_id=message_id)
    to, cc = reply_recipients(original, mailbox.address.lower(), reply_all=reply_all)
    lineage = lineage_of(original.content.headers)
    headers = {}
    if lineage.message_id:
        parents = list(lineage.references) or ([lineage.in_reply_to] if lineage.in_reply_to else [])
        headers = {"In-Reply-To": f"<{lineage.message_id}>",
                   "References": " ".join(f"<{key}>" for key in [*parents, lineage.message_id])}
    return outbound_queue(mailbox=mailbox, to=to, cc=cc, subject=subject_with("Re:", REPLY_PREFIX, original.subject),
                          text=text, html=html, attachments=attachments, headers=headers,
                          joining=original.thread_id)


def forward_queue(*, mailbox: Mailbox, message_id: int, to: list[str], text: str = "") -> OutboxMail:
    """Forward message `message_id` of `mailbox` to `to`: the original attached as
    message/rfc822, its bytes as they were received."""
    original = queries.message_get(mailbox=mailbox, message_id=message_id)
    raw = queries.message_raw(mailbox=mailbox, message_id=message_id)
    # A placeholder mail_build swaps for the original's bytes, which Python would re-fold.
    placeholder = f"relay-forwarded-{uuid.uuid4().hex}"
    part = MIMEBase("message", "rfc822")
    del part["MIME-Version"]
    part.set_payload(placeholder)
    part["Content-Transfer-Encoding"] = "7bit" if raw.isascii() else "8bit"
    part.add_header("Content-Disposition", "attachment", filename="forwarded.eml")
    introduction = "\n".join([
        "---------- Forwarded message ----------",
        f"From: {original.from_header}",
        f"Date: {header(original.content.headers, 'Date')}",
        f"Subject: {original.subject}",
        f"To: {original.to_header}",
    ])
    return outbound_queue(mailbox=mailbox, to=to, subject=subject_with("Fwd:", FORWARD_PREFIX, original.subject),
                          text=f"{text}\n\n{introduction}\n" if text else f"{introduction}\n", parts=[part],
                          verbatim={placeholder: raw}, joining=original.thread_id)
