"""Building a mail Relay sends: its bytes made once and signed, its header lines checked,
its outbox row written in the transaction that causes it."""
import uuid
from email.mime.base import MIMEBase

from django.conf import settings
from django.core.mail import EmailMultiAlternatives

from relay.models import KIND_PRIORITY, OutboxMail
from relay.outbox import header_lines
from relay.outbox.signing import dkim_signed



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
    """The one rule for header lines (relay.outbox.header_lines): InvalidRequest naming the field."""
    for field, addresses in (("to", to), ("cc", cc), ("bcc", bcc), ("reply_to", [reply_to] if reply_to else [])):
        for value in addresses:
            header_lines.address(value, field)
    header_lines.one_line(subject, "subject")
    for name, value in headers.items():
        header_lines.one_line(name, "headers")
        header_lines.one_line(value, "headers")


def mail_queue(**fields) -> OutboxMail:
    """Write one mail into the outbox inside the transaction that causes it (a trigger
    NOTIFYs the mailers on commit)."""
    mail = mail_build(**fields)
    mail.save(force_insert=True)
    return mail
