"""Building a mail Relay sends: its header lines checked, by the one rule for every door of
what may go into one (no character any line breaker splits on, SECURITY.md "Mail out";
strict addresses), its bytes made once and DKIM-signed (relaxed/relaxed, with the From
domain's key or RELAY_DKIM_PRIVATE_KEY_FILE's), its outbox row written in the
transaction that causes it. A release (docs/sandbox.md) is built here too: a caught
message's bytes as they were, behind a Resent-* block."""
import logging
import re
import uuid
from datetime import datetime, timezone
from email.mime.base import MIMEBase
from email.utils import format_datetime, parseaddr

import dkim
from django.conf import settings
from django.core.mail import EmailMultiAlternatives

from domains.keys import KeyUnreadable
from domains.services import signing_key
from mailboxes.errors import InvalidRequest
from mailboxes.mail_format import breaks_line
from relay.models import KIND_PRIORITY, OutboxKind, OutboxMail

logger = logging.getLogger(__name__)


# --- header lines ---------------------------------------------------------------------------
# A local part of atext and dots, a domain of letters, digits and hyphens: nothing quoted.
ADDRESS_PATTERN = r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
_ADDRESS = re.compile(ADDRESS_PATTERN)


def one_line(value: str, field: str) -> str:
    """`value`, or InvalidRequest naming `field` when it holds a line breaker."""
    if breaks_line(value):
        raise InvalidRequest(f"{field} must be one line: no CR, LF or other line-breaking character "
                             "(vertical tab, form feed, U+001C-U+001E, U+0085, U+2028, U+2029) and no NUL.",
                             field=field)
    return value


def strict_address(value: str) -> bool:
    """Whether `value` is an address Relay writes into a header as it is."""
    return len(value) <= 320 and bool(_ADDRESS.match(value))


def address(value: str, field: str) -> str:
    if not strict_address(value):
        raise InvalidRequest(f"{field} must be an email address (local@domain, no quoting, no control "
                             "characters).", field=field)
    return value


# --- the mail -------------------------------------------------------------------------------



def mail_build(*, kind: str, to: list[str], subject: str, text: str, html: str = "", from_email: str = "",
               mailbox=None, token=None, cc: list[str] = (), bcc: list[str] = (), reply_to: str = "",
               headers: dict | None = None, attachments: list[MIMEBase] = (),
               verbatim: dict[str, bytes] | None = None) -> OutboxMail:
    """One outbox mail, unsaved, its bytes built and DKIM-signed now: a bad mail fails its
    request, and every attempt sends the same bytes. `verbatim`: placeholders swapped for bytes."""
    _check_header_lines(to=to, cc=cc, bcc=bcc, reply_to=reply_to, subject=subject, headers=headers or {})
    mail = OutboxMail(kind=kind, priority=KIND_PRIORITY[kind], to=to, cc=list(cc), bcc=list(bcc), subject=subject,
                      text=text, html=html, from_email=from_email or settings.DEFAULT_FROM_EMAIL, mailbox=mailbox,
                      token=token)
    email = _message(mail)
    email.reply_to = [reply_to] if reply_to else []
    email.extra_headers = dict(headers or {})
    email.attachments = list(attachments)
    message = email.message()
    if verbatim and message.is_multipart():
        # A boundary no sender can foresee, so none can appear in the verbatim bytes.
        message.set_boundary(f"relay-{uuid.uuid4().hex}")
    raw = message.as_bytes(linesep="\r\n")
    for placeholder, data in (verbatim or {}).items():
        raw = raw.replace(placeholder.encode(), data, 1)
    mail.message = dkim_signed(raw, mail.from_email)
    return mail


# OutboxMail.subject's length (RFC 5322's line): a caught subject may be longer; the row only names it.
SUBJECT_MAX_CHARS = 998
# Header lines are folded before this many characters where they can be (RFC 5322 2.1.1).
FOLD_AT = 78


def mail_resent(*, mailbox, to: list[str], raw: bytes, subject: str, at: datetime) -> OutboxMail:
    """A caught message sent on from `mailbox` to `to`, unsaved: its bytes exactly as they
    were, behind a Resent-From/-To/-Date/-Message-ID block (RFC 5322 3.6.6: prepended, so a
    message resent again keeps each block), DKIM-signed for the mailbox's domain. Its
    envelope's recipients are `to` alone, whatever its own To, Cc or Bcc say."""
    for value in to:
        address(value, "to")
    eol = _line_ending(raw)
    domain = mailbox.address.rpartition("@")[2]
    block = [f"Resent-From: {mailbox.address}", _folded("Resent-To:", to, eol),
             f"Resent-Date: {format_datetime(at.astimezone(timezone.utc), usegmt=True)}",
             f"Resent-Message-ID: <{uuid.uuid4().hex}@{domain}>"]
    resent = eol.join(line.encode() for line in block) + eol + raw
    mail = OutboxMail(kind=OutboxKind.SEND, priority=KIND_PRIORITY[OutboxKind.SEND], to=list(to), cc=[], bcc=[],
                      subject=subject[:SUBJECT_MAX_CHARS], text="", from_email=mailbox.address, mailbox=mailbox)
    mail.message = dkim_signed(resent, mail.from_email)
    return mail


def _line_ending(raw: bytes) -> bytes:
    """The line ending the message's header is written with (CRLF unless its first line ends
    with a bare LF), so the block prepended to it reads as one header."""
    first = raw.find(b"\n")
    return b"\n" if first > 0 and raw[first - 1:first] != b"\r" else b"\r\n"


def _folded(name: str, addresses: list[str], eol: bytes) -> str:
    """`name` and the addresses, comma-separated, folded at FOLD_AT where an address allows."""
    lines, line = [], name
    for index, value in enumerate(addresses):
        item = value + ("," if index < len(addresses) - 1 else "")
        if line != name and len(line) + 1 + len(item) > FOLD_AT:
            lines.append(line)
            line = ""
        line = f"{line} {item}"
    lines.append(line)
    return eol.decode().join(lines)


def _message(mail: OutboxMail) -> EmailMultiAlternatives:
    email = EmailMultiAlternatives(subject=mail.subject, body=mail.text, from_email=mail.from_email, to=mail.to,
                                   cc=mail.cc, bcc=mail.bcc)
    if mail.html:
        email.attach_alternative(mail.html, "text/html")
    return email


def _check_header_lines(*, to, cc, bcc, reply_to: str, subject: str, headers: dict) -> None:
    """The one rule for header lines: InvalidRequest naming the field."""
    for field, addresses in (("to", to), ("cc", cc), ("bcc", bcc), ("reply_to", [reply_to] if reply_to else [])):
        for value in addresses:
            address(value, field)
    one_line(subject, "subject")
    for name, value in headers.items():
        one_line(name, "headers")
        one_line(value, "headers")


def mail_queue(**fields) -> OutboxMail:
    """Write one mail into the outbox inside the transaction that causes it (a trigger
    NOTIFYs the mailers on commit)."""
    mail = mail_build(**fields)
    mail.save(force_insert=True)
    return mail


# --- the signature --------------------------------------------------------------------------
SIGNED_HEADERS = [b"from", b"to", b"cc", b"subject", b"date", b"message-id", b"reply-to", b"mime-version",
                  b"content-type", b"content-transfer-encoding", b"in-reply-to", b"references",
                  b"resent-from", b"resent-to", b"resent-date", b"resent-message-id"]


def dkim_signed(message: bytes, from_email: str) -> bytes:
    """`message` with a DKIM-Signature when its From domain has a key (an unreadable key is
    logged, and the message goes unsigned)."""
    domain = parseaddr(from_email)[1].rpartition("@")[2].lower()
    try:
        key = signing_key(domain) if domain else None
    except KeyUnreadable as exc:
        logger.error("mail from %s goes unsigned: %s", domain, exc)
        return message
    if key is None:
        return message
    selector, private_pem = key
    # A released message's header is whatever an app wrote: a line dkimpy cannot read
    # leaves the mail unsigned rather than unsent.
    present = {line.split(b":", 1)[0].strip().lower() for line in message.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
               if b":" in line and not line[:1].isspace()}
    try:
        signature = dkim.sign(message, selector.encode(), domain.encode(), private_pem,
                              include_headers=[name for name in SIGNED_HEADERS if name in present],
                              canonicalize=(b"relaxed", b"relaxed"))
    except dkim.MessageFormatError as exc:
        logger.warning("mail from %s goes unsigned: dkimpy cannot read its header (%s)", domain, exc)
        return message
    return signature + message
