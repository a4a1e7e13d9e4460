"""Sending mail from a mailbox: an outbox row within the plan's quotas, and a copy kept in
the mailbox (direction "out") in the same transaction; replies and forwards (docs/api.md)
are sends whose recipients, subject and headers come from a message of the same mailbox
(RFC 5322, 3.6.4), kept in its thread; a release sends a caught message on as it was
(RFC 5322, 3.6.6; docs/sandbox.md)."""
import base64
import binascii
import functools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from email import encoders
from email.mime.base import MIMEBase
from email.utils import getaddresses

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from accounts.models import Account, plan_limit
from mailboxes.errors import Conflict, Forbidden, Gone, InvalidRequest, MessageTooLarge, NotFound, QuotaExceeded
from mailboxes.mail_format import FORWARD_PREFIX, NOT_ONE_LINE, REPLY_PREFIX, breaks_line, header, lineage_of
from mailboxes.messages import MailboxFull, recipient_by_id
from mailboxes.models import Direction, Mailbox, Message
from core.clock import db_now
from relay import reading
from relay.ingest import message_ingest
from relay.models import OutboxKind, OutboxMail
from relay.outbox.build import mail_build, mail_resent, one_line, strict_address
from relay.outbox.delivery import deliveries_start, suppressions_check

DAY = timedelta(days=1)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str  # type/subtype, checked by the caller
    content: bytes

    def part(self) -> MIMEBase:
        """A MIME part holding the bytes in base64, so they arrive exactly as given."""
        maintype, _, subtype = self.content_type.partition("/")
        part = MIMEBase(maintype, subtype)
        part.set_payload(self.content)
        encoders.encode_base64(part)
        filename = self.filename if self.filename.isascii() else ("utf-8", "", self.filename)
        part.add_header("Content-Disposition", "attachment", filename=filename)
        return part


# --- what a send, a reply and a forward take, for every door ----------------------------------
MAX_RECIPIENTS = 50  # in each of To, Cc and Bcc; the plan's recipients_per_send counts them together
MAX_ATTACHMENTS = 20
SUBJECT_MAX = 998  # RFC 5322's line
# Bodies bounded so that the largest, every character JSON-escaped, fit a request.
BODY_MAX = 100_000
FILENAME_MAX = 255
# type/subtype (RFC 2045's tokens); multipart/* and message/* are the message's to make.
CONTENT_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
_CONTENT_TYPE = re.compile(CONTENT_TYPE_PATTERN)


def sending_checked(arguments: dict) -> dict:
    """A send's, a reply's or a forward's arguments (those given) as every door takes them,
    attachments as Attachment; InvalidRequest naming the first one that is wrong. Text is
    taken trimmed, as the API always has."""
    return {name: sending_rule(name)(value) if name in _SENDING_RULES else value for name, value in arguments.items()}


def sending_rule(name: str) -> Callable:
    """The rule for one of those arguments, as a route's field calls it."""
    return functools.partial(_SENDING_RULES[name], field=name)


def _recipients(values: list, field: str) -> list[str]:
    if not values and field == "to":
        raise InvalidRequest("needs at least one address.", field=field)
    if len(values) > MAX_RECIPIENTS:
        raise InvalidRequest(f"takes at most {MAX_RECIPIENTS} addresses.", field=field)
    return [_address(value, field, f"item {index}: ") for index, value in enumerate(values)]


def _address(value, field: str, where: str = "") -> str:
    if not isinstance(value, str) or not strict_address(value.strip()):
        raise InvalidRequest(f"{where}must be an email address (local@domain, no quoting, no control characters).",
                             field=field)
    return value.strip()


def _subject(value: str, field: str) -> str:
    return _one_line(value, field, SUBJECT_MAX)


def _one_line(value: str, field: str, most: int, where: str = "") -> str:
    value = value.strip()
    if not value:
        raise InvalidRequest(f"{where}may not be empty.", field=field)
    if breaks_line(value):
        raise InvalidRequest(f"{where}{NOT_ONE_LINE}", field=field)
    if len(value) > most:
        raise InvalidRequest(f"{where}takes at most {most} characters.", field=field)
    return value


def _body(value: str, field: str) -> str:
    value = value.strip()
    if len(value) > BODY_MAX:
        raise InvalidRequest(f"takes at most {BODY_MAX} characters.", field=field)
    return value


def _attachments(values: list, field: str) -> list[Attachment]:
    if len(values) > MAX_ATTACHMENTS:
        raise InvalidRequest(f"takes at most {MAX_ATTACHMENTS} files.", field=field)
    return [_attachment(value, field, f"item {index}: ") for index, value in enumerate(values)]


def _attachment(value: dict, field: str, where: str) -> Attachment:
    filename = _one_line(value["filename"], field, FILENAME_MAX, f"{where}filename: ")
    content_type = value["content_type"].strip().lower()
    if not _CONTENT_TYPE.fullmatch(content_type):
        raise InvalidRequest(f"{where}content_type: must be a MIME type, type/subtype.", field=field)
    if content_type.startswith(("multipart/", "message/")):
        raise InvalidRequest(f"{where}content_type: multipart/* and message/* cannot be attached.", field=field)
    try:
        content = base64.b64decode(value["content_base64"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where}content_base64: must be base64 (RFC 4648, no line breaks).",
                             field=field) from None
    return Attachment(filename=filename, content_type=content_type, content=content)


_SENDING_RULES = {"to": _recipients, "cc": _recipients, "bcc": _recipients, "reply_to": _address,
                  "subject": _subject, "text": _body, "html": _body, "attachments": _attachments}


def check_send(owner: Account, recipients: int) -> None:
    """The plan's recipients-per-send and sends-per-day, under the account row's lock."""
    limit = plan_limit(owner.plan, "recipients_per_send")
    if recipients > limit:
        raise QuotaExceeded(f"The {owner.plan} plan allows {limit} recipients per send (To, Cc and Bcc together); "
                            "send to fewer at once.", retry_after=DAY.total_seconds())
    Account.objects.select_for_update().filter(id=owner.id).first()
    per_day = plan_limit(owner.plan, "sends_per_day")
    window = OutboxMail.objects.filter(kind=OutboxKind.SEND, mailbox__owner=owner,
                                       created_at__gt=db_now() - DAY)
    if window.count() >= per_day:
        oldest = window.order_by("created_at").values_list("created_at", flat=True).first()
        raise QuotaExceeded(f"The {owner.plan} plan allows {per_day} sends a day.",
                            retry_after=(oldest + DAY - db_now()).total_seconds())


def outbound_queue(*, mailbox: Mailbox, to: list[str], subject: str, text: str, html: str = "",
                   cc: list[str] = (), bcc: list[str] = (), reply_to: str = "", attachments: list[Attachment] = (),
                   headers: dict | None = None, parts: list[MIMEBase] = (), verbatim: dict[str, bytes] | None = None,
                   joining: int | None = None) -> OutboxMail:
    """Queue a message from an account's `mailbox` within its plan, keeping its copy in the
    mailbox (thread `joining`); `headers` and `parts` for replies and forwards."""
    may_send(mailbox)
    for attachment in attachments:
        one_line(attachment.filename, "attachments")
    if sum(len(attachment.content) for attachment in attachments) > settings.RELAY_MAX_MESSAGE_BYTES:
        raise MessageTooLarge()
    return _queued(mailbox, [*to, *cc, *bcc], joining, lambda: mail_build(
        kind=OutboxKind.SEND, mailbox=mailbox, from_email=mailbox.address, to=to, cc=cc, bcc=bcc, reply_to=reply_to,
        subject=subject, text=text, html=html, headers=headers,
        attachments=[*parts, *(attachment.part() for attachment in attachments)], verbatim=verbatim))


def may_send(mailbox: Mailbox) -> None:
    """Forbidden for a mailbox no account owns: an anonymous token cannot send (docs/api.md)."""
    if mailbox.owner_id is None:
        raise Forbidden("Sending mail needs an API key: anonymous mailbox tokens cannot send.")


def _queued(mailbox: Mailbox, recipients: list[str], joining: int | None, build: Callable[[], OutboxMail]
            ) -> OutboxMail:
    """Every send's one path into the outbox, in one transaction: the plan's limits and the
    suppression list for `recipients` (the envelope's), the mail `build` makes within the
    size limit, its copy kept in the mailbox, a queued state for each recipient."""
    with transaction.atomic():
        check_send(mailbox.owner, len(recipients))
        suppressions_check(account_id=mailbox.owner_id, recipients=recipients)
        mail = build()
        if len(mail.message) > settings.RELAY_MAX_MESSAGE_BYTES:
            raise MessageTooLarge()
        mail.kept_as_id = _keep_sent_copy(mailbox, bytes(mail.message), joining)
        mail.save(force_insert=True)
        deliveries_start(mail)
    return mail


def _keep_sent_copy(mailbox: Mailbox, raw: bytes, joining: int | None) -> int:
    """Store what is sent in the mailbox it is sent from; its bytes count toward the
    mailbox's storage like mail received."""
    recipient = recipient_by_id(mailbox.id)
    try:
        stored = message_ingest(raw=raw, mail_from=mailbox.address, recipients=[recipient] if recipient else [],
                                 authentication={}, direction=Direction.OUT, joining=joining)
    except MailboxFull:
        raise QuotaExceeded("The mailbox is full (its plan's storage quota counts sent mail too): delete messages "
                            "to send more.", retry_after=60) from None
    if not stored:
        raise Gone("The mailbox was deleted.")
    return stored[0]


def outbound_list(*, mailbox: Mailbox) -> QuerySet:
    return OutboxMail.objects.filter(mailbox=mailbox, kind=OutboxKind.SEND).order_by("-created_at", "-id")


def outbound_get(*, mailbox: Mailbox, outbound_id: int) -> OutboxMail:
    try:
        return outbound_list(mailbox=mailbox).get(id=outbound_id)
    except OutboxMail.DoesNotExist:
        raise NotFound() from None


# --- replies and forwards -------------------------------------------------------------------
MAX_SUBJECT = 998


def addresses(*values: str) -> list[str]:
    """The plain local@domain addresses in headers' values, each once, in order; anything a
    stranger wrote that Relay could not write back is skipped."""
    found: dict[str, str] = {}
    for _, address in getaddresses([value for value in values if value]):
        if strict_address(address):
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
    original = reading.message_get(mailbox=mailbox, message_id=message_id)
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
    original = reading.message_get(mailbox=mailbox, message_id=message_id)
    raw = reading.message_raw(mailbox=mailbox, message_id=message_id)
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


# --- releases (docs/sandbox.md, "Release") ----------------------------------------------------
def release_queue(*, mailbox: Mailbox, message_id: int, to: list[str]) -> OutboxMail:
    """Send message `message_id` of `mailbox` (a sandbox's catch, or any mail it received) on
    to `to` and to no one else, as it was caught, behind a Resent-* block: a send like any
    other (limits, suppression, the outbox, each recipient's state), kept in its thread.
    Conflict for a copy of mail the mailbox sent: that went out already, as a send."""
    may_send(mailbox)
    original = reading.message_get(mailbox=mailbox, message_id=message_id)
    if original.direction == Direction.OUT:
        raise Conflict("That message is a copy of mail this mailbox sent; only mail it caught or received can be "
                       "released.")
    raw = reading.message_raw(mailbox=mailbox, message_id=message_id)
    return _queued(mailbox, to, original.thread_id, lambda: mail_resent(
        mailbox=mailbox, to=to, raw=raw, subject=original.subject, at=db_now()))
