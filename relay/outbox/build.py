"""Building a mail Relay sends: its header lines checked, by the one rule for every door of
what may go into one (no character any line breaker splits on, SECURITY.md "Mail out";
strict addresses), its bytes made once and DKIM-signed (relaxed/relaxed, with the From
domain's key or RELAY_DKIM_PRIVATE_KEY_FILE's), its outbox row written in the
transaction that causes it."""
import logging
import re
import uuid
from email.mime.base import MIMEBase
from email.utils import parseaddr

import dkim
from django.conf import settings
from django.core.mail import EmailMultiAlternatives

from domains.keys import KeyUnreadable
from domains.services import signing_key
from mailboxes.errors import InvalidRequest
from mailboxes.mail_format import breaks_line
from relay.models import KIND_PRIORITY, OutboxMail

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
                  b"content-type", b"content-transfer-encoding", b"in-reply-to", b"references"]


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
    present = {line.split(b":", 1)[0].strip().lower() for line in message.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
               if b":" in line and not line[:1].isspace()}
    signature = dkim.sign(message, selector.encode(), domain.encode(), private_pem,
                          include_headers=[name for name in SIGNED_HEADERS if name in present],
                          canonicalize=(b"relaxed", b"relaxed"))
    return signature + message
