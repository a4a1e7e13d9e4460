"""Sending the outbox: the mailer (`manage.py runmailer`) LISTENs for queued rows (polls on
SQLite) and claims batches by count or time with SKIP LOCKED, a task sends each over one
SMTP connection and records each mail's outcome under its claim (docs/architecture.md,
"Mail out")."""
import logging
import select
import signal
import smtplib
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from email import message_from_bytes
from email.utils import parseaddr

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.db import DatabaseError, connection, connections, transaction
from django.db.models import Case, F, Q, TextField, Value, When
from django.db.models.functions import Now

from accounts.models import TokenAction
from accounts.services import token_usable
from core import task_names
from core.clock import db_now
from core.storage import commit_unflushed, notifies
from owed import ERROR_MAX_CHARS, OwedWork
from relay.models import DeliveryStatus, OutboxKind, OutboxMail, OutboxStatus
from relay.outbox.delivery import Answer, bounce_address, deliveries_pending, deliveries_record

logger = logging.getLogger(__name__)


# An outbox mail is owed work (owed/, docs/architecture.md).
OUTBOX = OwedWork(
    model=OutboxMail, state="status",
    owed=OutboxStatus.QUEUED, running=OutboxStatus.SENDING, dead=OutboxStatus.FAILED,
    max_retries_setting="RELAY_SEND_MAX_RETRIES", backoff_setting="RELAY_SEND_RETRY_BACKOFF_SECONDS",
    backoff_max_setting="RELAY_SEND_RETRY_BACKOFF_MAX_SECONDS", lease_setting="RELAY_MAILER_LEASE_SECONDS",
)


def batch_claim(*, limit: int, queued_before=None) -> tuple[uuid.UUID, list[int]]:
    """Claim up to `limit` owed mails for one batch (recovery, then activation, then the
    rest); `queued_before`: only older rows, for the idle tick that catches a missed NOTIFY."""
    now = db_now()
    owed = OUTBOX.free_to_take(now, owed_only=Q(created_at__lt=queued_before) if queued_before is not None else None)
    return OUTBOX.take_batch(OutboxMail.objects.filter(owed).order_by("priority", "id"), limit=limit, claimed_at=now)


# --- sending (the Celery task) -----------------------------------------------------------
class RetryableBatch(Exception):
    """Some mails of a batch got a 4xx or no connection and have attempts left."""


@dataclass
class Outcome:
    status: str  # an OutboxStatus, or "retry"
    error: str = ""


def _retryable(exc: Exception) -> bool:
    """The relay was down, slow, or answered 4xx ("try later"). A 5xx, or a message
    Django cannot build, fails the same way every time."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(400 <= code < 500 for code, _ in exc.recipients.values())
    if isinstance(exc, smtplib.SMTPResponseException):
        return 400 <= exc.smtp_code < 500
    return isinstance(exc, (smtplib.SMTPServerDisconnected, OSError))


def _why_not_send(mail: OutboxMail, now) -> str:
    """Why this mail should no longer go out at `now` (the database's), or "" if it should."""
    # An activation mail carries a link that wrong codes do not burn (token_usable).
    if mail.token_id is not None and not token_usable(mail.token, now,
                                                      by_link=mail.token.action == TokenAction.ACTIVATION):
        return "its token was used or expired before the mail left"
    if mail.mailbox_id is not None:
        mailbox = mail.mailbox
        if not mailbox.receives(now):
            return "the mailbox expired or was deleted before the message left"
    return ""


def _take_send_slot() -> None:
    """RELAY_MAILER_MAX_PER_SECOND across every worker: a counter per second in the
    shared cache (atomic INCR on Redis). Over the cap, wait for the next second."""
    cap = settings.RELAY_MAILER_MAX_PER_SECOND
    if not cap:
        return
    while True:
        # A rate, not an instant two workers must agree on: a worker whose clock is off
        # counts in its own seconds, and the cap still holds per second of each clock.
        second = int(time.time())
        key = f"relay:mailer:sent:{second}"
        cache.add(key, 0, timeout=5)
        try:
            taken = cache.incr(key)
        except ValueError:  # the key expired between add and incr
            continue
        if taken <= cap:
            return
        time.sleep(max(0.0, second + 1 - time.time()))


# Sent mails are recorded this many at a time: a worker killed mid-batch sends at most
# this many again, and the common path costs one statement per group.
SENT_GROUP = 10


def _record_sent(claim: uuid.UUID, mail_ids: list[int]) -> None:
    """Mark mails sent if this batch still holds them. The wire bytes go (a send's copy is
    in its mailbox); a token mail's text too, since its link is a credential."""
    if not mail_ids:
        return

    def drop_if_token(field: str) -> Case:
        return Case(When(token__isnull=False, then=Value("")), default=F(field), output_field=TextField())

    with transaction.atomic():
        # A lost outcome leaves the row `sending`, and its lease hands it out again.
        commit_unflushed()
        OUTBOX.settle(mail_ids, claim, state=OutboxStatus.SENT, sent_at=Now(), error="",
                      text=drop_if_token("text"), html=drop_if_token("html"), message=b"")
    mail_ids.clear()


def _record(mail: OutboxMail, claim: uuid.UUID, outcome: Outcome) -> None:
    """Write one mail's outcome other than sent, if this batch still holds it."""
    if outcome.status == "retry":
        # Still held, for as long as the retry may take; a lost retry lapses back to any mailer.
        OUTBOX.extend_lease(mail.id, claim, error=outcome.error)
    elif outcome.status == OutboxStatus.SKIPPED:
        OUTBOX.settle(mail.id, claim, state=outcome.status, error=outcome.error, text="", html="", message=b"")
    else:
        OUTBOX.settle(mail.id, claim, state=outcome.status, error=outcome.error)


class _Built(EmailMessage):
    """A mail already built, for the backends other than SMTP (the console prints it as
    it would go on the wire)."""

    def __init__(self, mail: OutboxMail, connection):
        super().__init__(subject=mail.subject, body=mail.text, from_email=mail.from_email, to=mail.to, cc=mail.cc,
                         bcc=mail.bcc, connection=connection)
        self.raw = bytes(mail.message)

    def message(self, **kwargs):
        return message_from_bytes(self.raw)


def _transmit(mail: OutboxMail, smtp) -> None:
    """Send one mail over the batch's open connection: the bytes built at queue time, to
    its To, Cc and Bcc."""
    if isinstance(smtp, SmtpBackend):
        smtp.connection.sendmail(parseaddr(mail.from_email)[1], mail.recipients(), bytes(mail.message))
    else:
        _Built(mail, smtp).send(fail_silently=False)


def _answer(code: int, text: bytes | str) -> Answer:
    """A reply of the next hop as a recipient's state: 2xx sent, 4xx deferred, else failed."""
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    status = (DeliveryStatus.SENT if 200 <= code < 300 else
              DeliveryStatus.DEFERRED if 400 <= code < 500 else DeliveryStatus.FAILED)
    return Answer(status, code, f"{code} {text}".strip())


def _transmit_each(mail: OutboxMail, smtp, recipients: list[str]) -> dict[str, Answer]:
    """Send a mailbox's message to `recipients` over the batch's connection, one RCPT at a
    time, with its own Return-Path (delivery.bounce_address): what the next hop answered
    for each. A connection lost midway leaves the rest deferred."""
    if not isinstance(smtp, SmtpBackend):
        _Built(mail, smtp).send(fail_silently=False)
        return {recipient: Answer(DeliveryStatus.SENT, None, "handed to the mail backend") for recipient in recipients}
    conversation = smtp.connection
    raw = bytes(mail.message)
    answers: dict[str, Answer] = {}
    try:
        conversation.ehlo_or_helo_if_needed()
        options = [f"size={len(raw)}"] if conversation.does_esmtp and conversation.has_extn("size") else []
        code, text = conversation.mail(bounce_address(mail), options)
        if code == 421:  # the next hop is closing the connection (RFC 5321 4.2.2)
            raise _Interrupted({recipient: _answer(code, text) for recipient in recipients})
        if code != 250:
            _reset(conversation)
            return {recipient: _answer(code, text) for recipient in recipients}
        accepted = []
        for recipient in recipients:
            code, text = conversation.rcpt(recipient)
            if code in (250, 251):
                accepted.append(recipient)
            else:
                answers[recipient] = _answer(code, text)
        if not accepted:
            _reset(conversation)
            return answers
        try:
            code, text = conversation.data(raw)
        except smtplib.SMTPDataError as exc:
            code, text = exc.smtp_code, exc.smtp_error
        answers.update({recipient: _answer(code, text) for recipient in accepted})
    except (smtplib.SMTPServerDisconnected, smtplib.SMTPResponseException, OSError) as exc:
        code = getattr(exc, "smtp_code", None)
        if isinstance(code, int) and code >= 500:  # a 5xx, to EHLO say: final, never retried
            failed = _answer(code, getattr(exc, "smtp_error", b""))
            answers.update({recipient: failed for recipient in recipients if recipient not in answers})
        detail = f"{type(exc).__name__}: {exc}"
        answers.update({recipient: Answer(DeliveryStatus.DEFERRED, code, detail)
                        for recipient in recipients if recipient not in answers})
        raise _Interrupted(answers) from exc
    return answers


def _reset(conversation) -> None:
    """RSET after a refused transaction; a connection that broke meanwhile shows itself to
    the next mail, which opens a fresh one."""
    try:
        conversation.rset()
    except (smtplib.SMTPException, OSError):
        pass


class _Interrupted(Exception):
    """The connection broke during a send: the answers had so far, the rest deferred."""

    def __init__(self, answers: dict[str, Answer]):
        super().__init__("the connection broke")
        self.answers = answers


def _send_tracked(mail: OutboxMail, smtp) -> tuple[Outcome, bool]:
    """Send a mailbox's message to the recipients it still owes and record each one's
    state: the mail's outcome (a retry while any is deferred and attempts are left), and
    False when the connection broke and must be opened anew."""
    broken, answers = False, {}
    pending = deliveries_pending(mail)
    try:
        if pending:  # a bounce may have settled every one of them since the last try
            answers = _transmit_each(mail, smtp, pending)
    except _Interrupted as interrupted:
        answers, broken = interrupted.answers, True
    deferred = [recipient for recipient, answer in answers.items() if answer.status == DeliveryStatus.DEFERRED]
    retry = bool(deferred) and OUTBOX.has_retry_left(mail.attempts)
    if deferred and not retry:
        for recipient in deferred:
            answers[recipient] = Answer(DeliveryStatus.FAILED, answers[recipient].smtp_code,
                                        f"retries spent; last answer: {answers[recipient].detail}")
    deliveries_record(mail, answers)
    if retry:
        outcome = Outcome("retry", f"{len(deferred)} recipient(s) deferred: {answers[deferred[0]].detail}"
                          [:ERROR_MAX_CHARS])
    elif mail.deliveries.filter(status__in=(DeliveryStatus.SENT, DeliveryStatus.BOUNCED,
                                             DeliveryStatus.COMPLAINED)).exists():
        outcome = Outcome(OutboxStatus.SENT)
    else:
        failed = next(iter(answers.values()), Answer(DeliveryStatus.FAILED, None, "no recipient left to send to"))
        outcome = Outcome(OutboxStatus.FAILED, f"every recipient failed: {failed.detail}"[:ERROR_MAX_CHARS])
    return outcome, not broken


def _fail_pending(mail: OutboxMail, reason: str) -> None:
    """A mailbox's message that will not leave: what it still owed, failed for `reason`."""
    if mail.kind == OutboxKind.SEND:
        deliveries_record(mail, {recipient: Answer(DeliveryStatus.FAILED, None, reason)
                                 for recipient in deliveries_pending(mail)})


def batch_send(*, claim: uuid.UUID, mail_ids: list[int], again: bool = False) -> dict[str, int]:
    """Send the mails this claim still holds over one connection, each with its outcome;
    raises RetryableBatch when any is to be retried. A retry (`again`) counts its attempt first."""
    if again:
        OUTBOX.retry_held(mail_ids, claim)
    mails = list(OutboxMail.objects.select_related("mailbox", "token")
                 .filter(id__in=mail_ids, claim=claim, status=OutboxStatus.SENDING).order_by("priority", "id"))
    counts: dict[str, int] = {}

    def settle(mail: OutboxMail, outcome: Outcome) -> None:
        if outcome.status != OutboxStatus.SENT:
            _record(mail, claim, outcome)
            if outcome.status in (OutboxStatus.FAILED, OutboxStatus.SKIPPED):
                _fail_pending(mail, outcome.error)
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
        _log(mail, outcome)

    to_send = []
    now = db_now()  # once for the batch
    for mail in mails:
        reason = _why_not_send(mail, now)
        if reason:
            settle(mail, Outcome(OutboxStatus.SKIPPED if mail.token_id else OutboxStatus.FAILED, reason))
        elif OUTBOX.past_last_attempt(mail.attempts):
            # Reclaimed after a lapsed lease with its attempts already spent.
            settle(mail, Outcome(OutboxStatus.FAILED, mail.last_error or "no attempts left"))
        else:
            to_send.append(mail)
    sent: list[int] = []
    smtp = None
    try:
        for mail in to_send:
            _take_send_slot()
            try:
                if smtp is None:
                    smtp = get_connection(fail_silently=False)
                    smtp.open()
                if mail.kind == OutboxKind.SEND and mail.deliveries.exists():
                    outcome, intact = _send_tracked(mail, smtp)
                    if outcome.status == OutboxStatus.SENT:
                        sent.append(mail.id)
                    settle(mail, outcome)
                    if not intact:
                        smtp.close()  # the next mail opens a fresh connection
                        smtp = None
                    if len(sent) >= SENT_GROUP:
                        _record_sent(claim, sent)
                    continue
                _transmit(mail, smtp)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"[:ERROR_MAX_CHARS]
                retry = _retryable(exc) and OUTBOX.has_retry_left(mail.attempts)
                if retry and mail.kind == OutboxKind.SEND:
                    # No connection to the next hop: what it still owes is deferred, and why.
                    deliveries_record(mail, {recipient: Answer(DeliveryStatus.DEFERRED, getattr(exc, "smtp_code", None),
                                                               error) for recipient in deliveries_pending(mail)})
                settle(mail, Outcome("retry" if retry else OutboxStatus.FAILED, error))
                if isinstance(exc, (smtplib.SMTPServerDisconnected, OSError)) and smtp is not None:
                    smtp.close()  # the next mail opens a fresh connection
                    smtp = None
                continue
            sent.append(mail.id)
            settle(mail, Outcome(OutboxStatus.SENT))
            if len(sent) >= SENT_GROUP:
                _record_sent(claim, sent)
    finally:
        _record_sent(claim, sent)
        if smtp is not None:
            smtp.close()
    if counts.get("retry"):
        raise RetryableBatch(f"{counts['retry']} of {len(mails)} mail(s) to retry")
    return counts


def _log(mail: OutboxMail, outcome: Outcome) -> None:
    if outcome.status == OutboxStatus.SENT:
        logger.info("sent %s mail %s to %d recipient(s)", mail.kind, mail.id, len(mail.recipients()))
    elif outcome.status == "retry":
        logger.warning("%s mail %s not sent, will retry: %s", mail.kind, mail.id, outcome.error)
    elif outcome.status == OutboxStatus.SKIPPED:
        logger.info("skipped %s mail %s: %s", mail.kind, mail.id, outcome.error)
    else:
        logger.error("%s mail %s failed for good (a dead letter in the admin): %s", mail.kind, mail.id, outcome.error)


# --- the mailer -----------------------------------------------------------------------------
# Sent by name: relay/tasks.py imports this module (the batch's sending), so an import of
# the task would close a circle.
SEND_TASK = task_names.SEND_OUTBOX_BATCH

CHANNEL = "relay_outbox"
# The longest a wait lasts before the loop looks at its stop flag again.
MAX_WAIT_SECONDS = 1.0
# Most seconds between reconnection attempts after the database went away.
MAX_RECONNECT_WAIT_SECONDS = 5.0


class Mailer:
    def __init__(self, *, limit: int | None = None, timeout_ms: int | None = None) -> None:
        self.limit = limit or settings.RELAY_MAILER_BATCH_LIMIT
        self.timeout = (timeout_ms or settings.RELAY_MAILER_BATCH_TIMEOUT_MS) / 1000
        # Lapsed leases are looked for a few times per lease, and at least every 5 s.
        self.tick = min(5.0, max(0.5, settings.RELAY_MAILER_LEASE_SECONDS / 4))
        self.running = True
        self.listener = None

    def stop(self, *_) -> None:
        self.running = False

    # --- claiming and handing over ----------------------------------------------------
    def dispatch(self, *, reason: str, queued_before=None) -> int:
        """Claim one batch and hand it to a worker; returns its size."""
        claim, ids = batch_claim(limit=self.limit, queued_before=queued_before)
        if not ids:
            return 0
        logger.info("claimed a batch of %d mail(s) (%s)", len(ids), reason)
        try:
            current_app.send_task(SEND_TASK, args=(str(claim), ids))
        except Exception:
            # The rows stay claimed; when the lease lapses any mailer claims them again.
            logger.exception("could not queue a batch of %d mail(s); it is claimed again after its lease (%d s)",
                             len(ids), settings.RELAY_MAILER_LEASE_SECONDS)
        return len(ids)

    def drain(self, reason: str) -> None:
        while self.running and self.dispatch(reason=reason) == self.limit:
            pass

    def idle_tick(self) -> None:
        """Batches whose lease lapsed, and queued rows older than a batch timeout (their
        notification was missed, or came while this mailer was reconnecting)."""
        missed_before = db_now() - timedelta(seconds=self.timeout)
        while self.running and self.dispatch(reason="lapsed or missed", queued_before=missed_before) == self.limit:
            pass

    # --- the loops ----------------------------------------------------------------------
    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        listening = notifies()
        logger.info("mailer ready: %s (batch limit %d, timeout %d ms)",
                    f"listening on {CHANNEL}" if listening else "polling (no LISTEN on this database)",
                    self.limit, self.timeout * 1000)
        failures = 0
        while self.running:
            try:
                self.listen_loop() if listening else self.poll_loop()
            except DatabaseError as exc:
                failures += 1
                wait = min(MAX_RECONNECT_WAIT_SECONDS, 0.2 * 2 ** failures)
                logger.warning("lost the database connection (%s); reconnecting in %.1f s",
                               str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, wait)
                self.disconnect()
                self.sleep(wait)
            else:
                failures = 0
        self.disconnect()
        logger.info("mailer stopped")

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.running and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, MAX_WAIT_SECONDS))

    def disconnect(self) -> None:
        for conn in (self.listener, connection):
            if conn is None:
                continue
            try:
                conn.close()
            except DatabaseError:
                pass  # already gone
        self.listener = None

    def poll_loop(self) -> None:
        self.drain("backlog")
        while self.running:
            self.sleep(self.timeout)
            self.drain("poll")

    def listen_loop(self) -> None:
        # A connection of its own, in autocommit: notifications arrive between
        # transactions, and the claims go through Django's usual connection.
        self.listener = connections.create_connection("default")
        self.listener.ensure_connection()
        self.listener.set_autocommit(True)
        raw = self.listener.connection
        with self.listener.cursor() as cursor:
            cursor.execute(f"LISTEN {CHANNEL}")
        logger.info("connected; listening on %s", CHANNEL)
        self.drain("backlog")
        seen, first_at, last_tick = 0, 0.0, time.monotonic()
        while self.running:
            try:
                raw.poll()
            except Exception as exc:  # psycopg's own errors, before Django wraps them
                raise DatabaseError(str(exc)) from exc
            if raw.notifies:
                if not seen:
                    first_at = time.monotonic()
                seen += len(raw.notifies)
                raw.notifies.clear()
            now = time.monotonic()
            if seen >= self.limit:
                self.dispatch(reason="batch limit reached")
                # The notifications beyond this batch wait for the next one, timed anew.
                seen -= self.limit
                first_at = now
                continue
            if seen and now - first_at >= self.timeout:
                self.dispatch(reason="batch timeout")
                seen = 0
                continue
            if now - last_tick >= self.tick:
                last_tick = now
                with self.listener.cursor() as cursor:
                    cursor.execute("SELECT 1")  # a health check of the listening connection
                self.idle_tick()
                continue
            wait = (first_at + self.timeout - now) if seen else (last_tick + self.tick - now)
            select.select([raw], [], [], max(0.0, min(wait, MAX_WAIT_SECONDS)))
