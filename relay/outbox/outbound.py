"""Sending mail from a mailbox: an outbox row within the plan's quotas, and a copy kept in
the mailbox (direction "out") in the same transaction."""
from dataclasses import dataclass
from datetime import timedelta
from email import encoders
from email.mime.base import MIMEBase

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from accounts.models import Account
from accounts.plans import plan_limit
from mailboxes.errors import Forbidden, Gone, MessageTooLarge, NotFound, QuotaExceeded
from mailboxes.models import Direction, Mailbox
from mailboxes.storing import MailboxFull, recipient_by_id
from owed import db_now
from relay.ingest import message_ingest
from relay.models import OutboxKind, OutboxMail
from relay.outbox import header_lines
from relay.outbox.build import mail_build

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
    if mailbox.owner_id is None:
        raise Forbidden("Sending mail needs an API key: anonymous mailbox tokens cannot send.")
    for attachment in attachments:
        header_lines.one_line(attachment.filename, "attachments")
    if sum(len(attachment.content) for attachment in attachments) > settings.RELAY_MAX_MESSAGE_BYTES:
        raise MessageTooLarge()
    with transaction.atomic():
        check_send(mailbox.owner, len(to) + len(cc) + len(bcc))
        mail = mail_build(kind=OutboxKind.SEND, mailbox=mailbox, from_email=mailbox.address, to=to, cc=cc, bcc=bcc,
                          reply_to=reply_to, subject=subject, text=text, html=html, headers=headers,
                          attachments=[*parts, *(attachment.part() for attachment in attachments)],
                          verbatim=verbatim)
        if len(mail.message) > settings.RELAY_MAX_MESSAGE_BYTES:
            raise MessageTooLarge()
        mail.kept_as_id = _keep(mailbox, bytes(mail.message), joining)
        mail.save(force_insert=True)
    return mail


def _keep(mailbox: Mailbox, raw: bytes, joining: int | None) -> int:
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
