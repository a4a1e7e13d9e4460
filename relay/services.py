"""Outbound mail: what a mailbox's owner asks Relay to send."""
import logging
import smtplib

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.utils import timezone

from mailboxes.models import Mailbox, OutboundMessage, OutboundStatus

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


def outbound_queue(*, mailbox: Mailbox, to: list[str], subject: str, text: str, html: str = "") -> OutboundMessage:
    outbound = OutboundMessage.objects.create(mailbox=mailbox, to=to, subject=subject, text=text, html=html)

    def publish() -> None:
        from relay.tasks import send_outbound

        try:
            send_outbound.delay(outbound.id)
        except Exception:
            # Leave it queued and say so: the row shows the send never started.
            logger.exception("could not queue outbound message %s", outbound.id)
            OutboundMessage.objects.filter(id=outbound.id).update(
                status=OutboundStatus.FAILED, last_error="could not reach the task queue"
            )

    transaction.on_commit(publish)
    return outbound


def outbound_send(*, outbound_id: int, final_attempt: bool) -> str:
    """Send one queued message through Django's email backend (EMAIL_URL). Raises
    RetryableSendError on a failure worth retrying; records `failed` once no retry is
    left or the failure is permanent.

    Delivery is at least once: a worker that dies between the relay's 250 and the
    status update sends the message again when the task is redelivered."""
    outbound = OutboundMessage.objects.select_related("mailbox").filter(id=outbound_id).first()
    if outbound is None or outbound.status != OutboundStatus.QUEUED:
        return "skipped"
    OutboundMessage.objects.filter(id=outbound_id).update(attempts=outbound.attempts + 1)
    email = EmailMultiAlternatives(
        subject=outbound.subject, body=outbound.text, from_email=outbound.mailbox.address, to=outbound.to
    )
    if outbound.html:
        email.attach_alternative(outbound.html, "text/html")
    try:
        email.send(fail_silently=False)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        if final_attempt or not _retryable(exc):
            OutboundMessage.objects.filter(id=outbound_id).update(status=OutboundStatus.FAILED, last_error=error)
            logger.error("outbound message %s failed for good: %s", outbound_id, error)
            return "failed"
        OutboundMessage.objects.filter(id=outbound_id).update(last_error=error)
        logger.warning("outbound message %s failed, will retry: %s", outbound_id, error)
        raise RetryableSendError(error) from exc
    OutboundMessage.objects.filter(id=outbound_id).update(status=OutboundStatus.SENT, sent_at=timezone.now(), last_error="")
    logger.info("sent outbound message %s from %s to %d recipient(s) via %s",
                outbound_id, outbound.mailbox.address, len(outbound.to), settings.EMAIL_BACKEND)
    return "sent"
