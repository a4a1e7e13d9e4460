"""What became of the mail Relay sends (docs/delivery.md): a state for each recipient of a
sent message, the signed Return-Path that bounces and complaints come back to, reading
them (RFC 3464 delivery status notifications, RFC 5965 feedback reports, and the
non-standard bounces of common servers through flufl.bounce), and the account's
suppression list that a hard bounce or a complaint adds to."""
import email
import hmac
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message as EmailMessage
from email.utils import collapse_rfc2231_value, parseaddr

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils.crypto import salted_hmac
from flufl.bounce import all_failures

from core.clock import db_now
from mailboxes import wakeups
from mailboxes.errors import NotFound, Suppressed
from mailboxes.signals import event_happened
from relay.models import (
    FINAL_DELIVERY,
    DeliveryStatus,
    OutboxKind,
    OutboxMail,
    RecipientDelivery,
    Suppression,
    SuppressionReason,
)

logger = logging.getLogger(__name__)


# --- the Return-Path ---------------------------------------------------------------------------
# The tag is the outbox mail's number and a MAC of it under the secret key: 96 bits no one
# without the key can forge, and that name one message only (docs/delivery.md).
_SALT = "relay.outbox.delivery.bounce-tag"
_MAC_HEX = 24
_TAGGED = re.compile(r"(?P<local>[^+@]{1,64})\+(?P<mail>[0-9a-f]{1,15})\.(?P<mac>[0-9a-f]{%d})" % _MAC_HEX)


def _mac(mail_id: int, secret: str) -> str:
    # A MAC, not a credential's digest: it signs a number anyone may see.
    return salted_hmac(_SALT, str(mail_id), secret=secret, algorithm="sha256").digest().hex()[:_MAC_HEX]


def bounce_address(mail: OutboxMail) -> str:
    """The envelope sender a sent message goes out with: RELAY_BOUNCE_LOCAL_PART+tag at the
    sending domain, where Relay's SMTP server takes its bounces."""
    domain = parseaddr(mail.from_email)[1].rpartition("@")[2].lower()
    return f"{settings.RELAY_BOUNCE_LOCAL_PART}+{mail.id:x}.{_mac(mail.id, settings.SECRET_KEY)}@{domain}"


def is_bounce_address(address: str) -> bool:
    """Whether `address` has a bounce address's shape. SMTP accepts every such address,
    whatever its tag, so that RCPT reveals nothing of which tags are real."""
    local = address.rpartition("@")[0].lower()
    match = _TAGGED.fullmatch(local)
    return match is not None and match["local"] == settings.RELAY_BOUNCE_LOCAL_PART


def mail_of_bounce_address(address: str) -> int | None:
    """The outbox mail a bounce address was made for, or None when its tag is not one
    Relay signed (under the secret key or one of its fallbacks)."""
    match = _TAGGED.fullmatch(address.rpartition("@")[0].lower())
    if match is None or match["local"] != settings.RELAY_BOUNCE_LOCAL_PART:
        return None
    mail_id = int(match["mail"], 16)
    for secret in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]:
        if hmac.compare_digest(_mac(mail_id, secret), match["mac"]):
            return mail_id
    return None


# --- each recipient's state --------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """What was learnt of one recipient: its new status, the SMTP code and text, if any."""

    status: str
    smtp_code: int | None = None
    detail: str = ""


# Which state may follow which. A final state stays, except that a bounce or a complaint
# may still come back for mail the next hop took, and a complaint after a bounce; so a
# replayed bounce, or a late "delayed" report, changes nothing. A bounce can come back
# before the mailer has written down the 250 it is answering (a next hop that bounces at
# once): it wins, and the 250 written after it changes nothing.
_NEXT = {
    DeliveryStatus.QUEUED: {DeliveryStatus.SENT, DeliveryStatus.DEFERRED, DeliveryStatus.FAILED,
                            DeliveryStatus.BOUNCED},
    DeliveryStatus.DEFERRED: {DeliveryStatus.SENT, DeliveryStatus.DEFERRED, DeliveryStatus.FAILED,
                              DeliveryStatus.BOUNCED},
    DeliveryStatus.SENT: {DeliveryStatus.BOUNCED, DeliveryStatus.COMPLAINED},
    DeliveryStatus.BOUNCED: {DeliveryStatus.COMPLAINED},
    DeliveryStatus.FAILED: set(),
    DeliveryStatus.COMPLAINED: set(),
}
_SUPPRESSES = {DeliveryStatus.BOUNCED: SuppressionReason.BOUNCED,
               DeliveryStatus.COMPLAINED: SuppressionReason.COMPLAINED}
DETAIL_MAX_CHARS = 1000


def deliveries_start(mail: OutboxMail) -> None:
    """One `queued` row for each recipient of a send, in the transaction that queues it."""
    now = db_now()
    seen = set()
    rows = []
    for recipient in mail.recipients():
        if recipient.lower() not in seen:
            seen.add(recipient.lower())
            rows.append(RecipientDelivery(mail=mail, recipient=recipient, at=now))
    RecipientDelivery.objects.bulk_create(rows)


def deliveries_pending(mail: OutboxMail) -> list[str]:
    """The recipients a (re)try still owes: those queued or deferred."""
    return list(mail.deliveries.filter(status__in=(DeliveryStatus.QUEUED, DeliveryStatus.DEFERRED))
                .order_by("id").values_list("recipient", flat=True))


def deliveries_record(mail: OutboxMail, answers: dict[str, Answer]) -> list[RecipientDelivery]:
    """Move each named recipient (compared without case) to its answer's state where that
    move is allowed; then the suppressions, webhooks and wake-ups the changes owe. Returns
    the rows whose status changed."""
    wanted = {recipient.lower(): answer for recipient, answer in answers.items()}
    changed, touched = [], []
    with transaction.atomic():
        now = db_now()
        for row in mail.deliveries.select_for_update().order_by("id"):
            answer = wanted.get(row.recipient.lower())
            if answer is None or answer.status not in _NEXT[row.status]:
                continue
            if answer.status != row.status:
                changed.append(row)
            row.status, row.smtp_code, row.at = answer.status, answer.smtp_code, now
            row.detail = " ".join(answer.detail.split())[:DETAIL_MAX_CHARS]
            touched.append(row)
        if not touched:
            return []
        RecipientDelivery.objects.bulk_update(touched, ["status", "smtp_code", "detail", "at"])
        owner_id = mail.mailbox.owner_id if mail.mailbox_id else None
        for row in changed:
            if row.status in _SUPPRESSES and owner_id is not None:
                _suppress(owner_id, row.recipient, _SUPPRESSES[row.status], mail.kept_as_id, now)
        for status in {row.status for row in changed}:
            event_happened.send(sender=RecipientDelivery, event=f"message.{status}", mail=mail,
                                deliveries=[row for row in changed if row.status == status])
        if mail.mailbox_id:
            wakeups.publish_on_commit([mail.mailbox_id], "delivery")
    for row in changed:
        logger.info("mail %s to %s: %s (%s %s)", mail.id, row.recipient, row.status, row.smtp_code or "-", row.detail)
    return changed


def delivery_of(mail: OutboxMail | None) -> list[dict]:
    """A sent message's recipients and their states, as every door shows them."""
    if mail is None:
        return []
    return [{"recipient": row.recipient, "status": row.status, "smtp_code": row.smtp_code, "detail": row.detail,
             "at": row.at} for row in mail.deliveries.order_by("id")]


def delivery_final(delivery: list[dict]) -> bool:
    """Whether every recipient has reached a final state (docs/delivery.md)."""
    return all(row["status"] in FINAL_DELIVERY for row in delivery)


def delivery_event(row: RecipientDelivery) -> dict:
    """One recipient's change as a mailbox's event stream tells it (`event: delivery`)."""
    return {"message_id": row.mail.kept_as_id, "recipient": row.recipient, "status": row.status,
            "smtp_code": row.smtp_code, "detail": row.detail, "at": row.at.isoformat().replace("+00:00", "Z")}


class DeliveryNews:
    """A mailbox's delivery changes since `start`, each told once, for its event stream. A
    change is looked for a little before the newest one told: a transaction that took its
    time before the clock's later reading yet committed after it is still seen."""

    OVERLAP = timedelta(seconds=5)
    PAGE = 200

    def __init__(self, start) -> None:
        self.start = self.newest = start
        self.told: set[tuple[int, object]] = set()

    def read(self, mailbox_id) -> list[dict]:
        """The changes not told yet, oldest first, read a page at a time by (at, id): the
        rows of one send share one time, and a send may have more recipients than a page."""
        news, last = [], None
        while True:
            rows = RecipientDelivery.objects.select_related("mail").filter(mail__mailbox_id=mailbox_id,
                                                                           at__gt=self.start)
            if last is None:
                rows = rows.filter(at__gte=max(self.start, self.newest - self.OVERLAP))
            else:
                rows = rows.filter(Q(at__gt=last[0]) | Q(at=last[0], id__gt=last[1]))
            page = list(rows.order_by("at", "id")[:self.PAGE])
            news += [row for row in page if (row.id, row.at) not in self.told]
            if page:
                last = (page[-1].at, page[-1].id)
                self.newest = max(self.newest, page[-1].at)
            if len(page) < self.PAGE:
                break
        self.told = {key for key in self.told if key[1] >= self.newest - self.OVERLAP}
        self.told.update((row.id, row.at) for row in news)
        return [delivery_event(row) for row in news]


# --- bounces and complaints --------------------------------------------------------------------
def bounce_receive(*, raw: bytes, addresses: list[str]) -> int:
    """Read a mail that came to bounce addresses: for each whose tag Relay signed, the
    recipients of that one message it names move to bounced, deferred or complained.
    Anything else (a forged or stale tag, a report naming no recipient of the message) is
    dropped: never stored, never answered. Returns how many recipients changed."""
    report = None
    changed = 0
    for address in dict.fromkeys(address.lower() for address in addresses):
        mail_id = mail_of_bounce_address(address)
        mail = (OutboxMail.objects.select_related("mailbox").filter(id=mail_id, kind=OutboxKind.SEND).first()
                if mail_id is not None else None)
        if mail is None:
            logger.info("dropped a bounce to %s: its tag names no message Relay sent", address)
            continue
        if report is None:
            report = bounce_read(raw)
        answers = _answers_for(mail, report)
        if not answers:
            logger.info("dropped a bounce for mail %s: it names none of the message's recipients", mail.id)
            continue
        changed += len(deliveries_record(mail, answers))
    return changed


@dataclass(frozen=True)
class Report:
    """What a bounce or complaint says: `answers` by recipient (lower-cased); `complaint`
    with no recipient named means the message's only recipient."""

    answers: dict[str, Answer]
    complaint: bool = False


def bounce_read(raw: bytes) -> Report:
    """A feedback report (RFC 5965), a delivery status notification (RFC 3464), or
    failing both, what flufl.bounce's detectors find."""
    message = email.message_from_bytes(raw)
    report_type = str(collapse_rfc2231_value(message.get_param("report-type", "", header="content-type"))).lower() \
        if message.get_content_type() == "multipart/report" else ""
    if report_type == "feedback-report":
        return _feedback_report(message)
    if report_type == "delivery-status":
        answers = _delivery_status(message)
        if answers:
            return Report(answers)
    temporary, permanent = all_failures(message)
    answers = {_text(address).lower(): Answer(DeliveryStatus.DEFERRED, None, "a delay report (non-standard)")
               for address in temporary}
    answers.update({_text(address).lower(): Answer(DeliveryStatus.BOUNCED, None, "a bounce (non-standard)")
                    for address in permanent})
    return Report(answers)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _field(fields: EmailMessage, name: str) -> str:
    """A header's value as text: the parser gives raw 8-bit values as Header objects."""
    return str(fields.get(name, ""))


def _part(message: EmailMessage, content_type: str) -> EmailMessage | None:
    return next((part for part in message.walk() if part.get_content_type() == content_type), None)


def _feedback_report(message: EmailMessage) -> Report:
    part = _part(message, "message/feedback-report")
    fields = part.get_payload()[0] if part is not None and part.is_multipart() else None
    if fields is None and part is not None:
        fields = email.message_from_string(_text(part.get_payload(decode=True) or b""))
    kind = (_field(fields, "Feedback-Type") if fields is not None else "").strip() or "abuse"
    detail = f"a complaint (feedback type {kind})"
    named = [parseaddr(str(value))[1]
             for value in (fields.get_all("Original-Rcpt-To", []) if fields is not None else [])]
    answer = Answer(DeliveryStatus.COMPLAINED, None, detail)
    return Report({address.lower(): answer for address in named if address}, complaint=True) if any(named) \
        else Report({"": answer}, complaint=True)


_CODE = re.compile(r"\b([245]\d\d)\b")


def _delivery_status(message: EmailMessage) -> dict[str, Answer]:
    part = _part(message, "message/delivery-status")
    if part is None:
        return {}
    blocks = part.get_payload() if part.is_multipart() else []
    answers = {}
    for block in blocks[1:]:  # the first block is about the message, the rest each a recipient
        recipient = (_address_field(_field(block, "Original-Recipient"))
                     or _address_field(_field(block, "Final-Recipient")))
        action = _field(block, "Action").strip().lower()
        status = _field(block, "Status").strip()
        diagnostic = " ".join(_field(block, "Diagnostic-Code").split())
        if not recipient:
            continue
        diagnostic_text = diagnostic.partition(";")[2].strip() or diagnostic
        code = _CODE.search(diagnostic_text)
        detail = diagnostic_text or f"status {status}"
        if action == "failed" or (not action and status.startswith("5")):
            answers[recipient] = Answer(DeliveryStatus.BOUNCED, int(code[1]) if code else None, detail)
        elif action == "delayed" or (not action and status.startswith("4")):
            answers[recipient] = Answer(DeliveryStatus.DEFERRED, int(code[1]) if code else None, detail)
    return answers


def _address_field(value: str) -> str:
    """The address of an `rfc822; user@example.com` field, lower-cased."""
    kind, _, address = value.partition(";")
    if not address:
        address = kind
    return parseaddr(address.strip())[1].lower()


def _answers_for(mail: OutboxMail, report: Report) -> dict[str, Answer]:
    """The report's answers for this message's own recipients only."""
    recipients = {recipient.lower(): recipient for recipient in mail.recipients()}
    if report.complaint and "" in report.answers:
        # No recipient named: the message's only recipient, if it had one.
        return {next(iter(recipients)): report.answers[""]} if len(recipients) == 1 else {}
    return {recipients[address]: answer for address, answer in report.answers.items() if address in recipients}


# --- suppression ------------------------------------------------------------------------------
def _suppress(account_id: int, address: str, reason: str, message_id: int | None, now) -> None:
    Suppression.objects.update_or_create(account_id=account_id, address=address.lower(),
                                         defaults={"reason": reason, "at": now, "message_id": message_id})


def suppressions_check(*, account_id: int, recipients: list[str]) -> None:
    """Suppressed naming the first recipient the account's mail no longer goes to."""
    lowered = {recipient.lower(): recipient for recipient in recipients}
    found = (Suppression.objects.filter(account_id=account_id, address__in=list(lowered))
             .order_by("address").values_list("address", "reason").first())
    if found is not None:
        raise Suppressed(address=lowered[found[0]], reason=found[1])


def suppression_list(*, account_id: int) -> QuerySet:
    return Suppression.objects.filter(account_id=account_id).order_by("-at", "address")


def suppression_remove(*, account_id: int, address: str) -> None:
    """Send to `address` again; NotFound when it was not suppressed."""
    deleted, _ = Suppression.objects.filter(account_id=account_id, address=address.strip().lower()).delete()
    if not deleted:
        raise NotFound()
