"""Outbound mail: what a mailbox's owner asks Relay to send."""
import logging
import smtplib

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from mailboxes.errors import Forbidden
from mailboxes.models import Mailbox, MailboxStatus, OutboundMessage, OutboundStatus
from mailboxes.quotas import check_send

logger = logging.getLogger(__name__)


class RetryableSendError(Exception):
    """A send that a later attempt may get through."""


def _retryable(exc: Exception) -> bool:
    """The relay was down, slow, or answered 4xx ("try later"). A 5xx, or a message
    Django cannot build, fails the same way every time."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(400 <= code < 500 for code, _ in exc.recipients.values())
    if isinstance(exc, smtplib.SMTPResponseException):
        return 400 <= exc.smtp_code < 500
    return isinstance(exc, (smtplib.SMTPServerDisconnected, OSError))


def send_attempt_limit() -> int:
    return settings.RELAY_SEND_MAX_RETRIES + 1


def outbound_queue(*, mailbox: Mailbox, to: list[str], subject: str, text: str, html: str = "") -> OutboundMessage:
    """Queue a message from `mailbox`. Only an owner's mailbox may send (an anonymous
    token would make Relay an open spam cannon), within its plan's quotas."""
    if mailbox.owner_id is None:
        raise Forbidden("Sending mail needs an API key: anonymous mailbox tokens cannot send.")
    with transaction.atomic():
        check_send(mailbox.owner, len(to))
        outbound = OutboundMessage.objects.create(mailbox=mailbox, to=to, subject=subject, text=text, html=html)

    def publish() -> None:
        from relay.tasks import send_outbound

        try:
            send_outbound.delay(outbound.id)
        except Exception:
            # Nothing else would ever send it (no lease covers outbound mail yet), so the
            # row says it failed rather than stay queued for ever.
            logger.exception("could not queue outbound message %s", outbound.id)
            OutboundMessage.objects.filter(id=outbound.id, status=OutboundStatus.QUEUED).update(
                status=OutboundStatus.FAILED, last_error="could not reach the task queue")

    transaction.on_commit(publish)
    return outbound


def _fail(outbound_id: int, error: str) -> str:
    OutboundMessage.objects.filter(id=outbound_id, status=OutboundStatus.SENDING).update(
        status=OutboundStatus.FAILED, last_error=error)
    logger.error("outbound message %s failed for good: %s", outbound_id, error)
    return "failed"


def outbound_send(*, outbound_id: int) -> str:
    """Send one queued message through Django's email backend (EMAIL_URL). Raises
    RetryableSendError on a failure worth retrying while attempts remain; records
    `failed` once none is left or the failure is permanent.

    The compare-and-set from queued to sending makes one task the sender: a duplicate or
    redelivered message finds nothing to take. Delivery is at least once: a worker that
    dies between the relay's 250 and the status update leaves the row `sending`."""
    taken = OutboundMessage.objects.filter(id=outbound_id, status=OutboundStatus.QUEUED).update(
        status=OutboundStatus.SENDING, attempts=F("attempts") + 1)
    if not taken:
        return "skipped"
    outbound = OutboundMessage.objects.select_related("mailbox").get(id=outbound_id)
    # Checked at send time too: a send queued just before its mailbox ended is not sent.
    mailbox = outbound.mailbox
    if mailbox.status != MailboxStatus.ACTIVE or mailbox.expires_at <= timezone.now():
        return _fail(outbound_id, "the mailbox expired or was deleted before the message left")
    email = EmailMultiAlternatives(subject=outbound.subject, body=outbound.text, from_email=mailbox.address,
                                   to=outbound.to)
    if outbound.html:
        email.attach_alternative(outbound.html, "text/html")
    try:
        email.send(fail_silently=False)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        if outbound.attempts >= send_attempt_limit() or not _retryable(exc):
            return _fail(outbound_id, error)
        OutboundMessage.objects.filter(id=outbound_id, status=OutboundStatus.SENDING).update(
            status=OutboundStatus.QUEUED, last_error=error)
        logger.warning("outbound message %s failed (attempt %d), will retry: %s", outbound_id, outbound.attempts, error)
        raise RetryableSendError(error) from exc
    OutboundMessage.objects.filter(id=outbound_id).update(status=OutboundStatus.SENT, sent_at=timezone.now(),
                                                          last_error="")
    logger.info("sent outbound message %s from %s to %d recipient(s) via %s",
                outbound_id, mailbox.address, len(outbound.to), settings.EMAIL_BACKEND)
    return "sent"
