import logging
import time
import uuid

from celery import shared_task
from django.conf import settings

from mailboxes.messages import contents_index_words
from relay import mailserver
from relay.backends import NothingToReconcile
from relay.outbox import send as outbox
from relay.outbox.account_mail import account_recovery_request
from relay.reconcile import orphans_find

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    acks_late=True,
    max_retries=settings.RELAY_SEND_MAX_RETRIES,
    # Below the lease: a batch that runs this long is cut off and claimed again.
    soft_time_limit=max(30, settings.RELAY_MAILER_LEASE_SECONDS * 8 // 10),
    time_limit=max(40, settings.RELAY_MAILER_LEASE_SECONDS * 9 // 10),
)
def send_outbox_batch(self, claim: str, mail_ids: list[int]) -> dict:
    """Send one batch the mailer claimed; see relay.outbox.send.batch_send."""
    try:
        return outbox.batch_send(claim=uuid.UUID(claim), mail_ids=mail_ids, again=self.request.retries > 0)
    except outbox.RetryableBatch as exc:
        # The mails to retry stay held, leased past the retry's wait (owed/).
        raise self.retry(exc=exc, countdown=outbox.OUTBOX.retry_delay(self.request.retries))


@shared_task(acks_late=True)
def mail_key_recovery(email: str) -> None:
    """POST /accounts/recover's work, off the request, so it answers in the same time
    whether the email has an account or not."""
    account_recovery_request(email=email)


# One run of index_owed_words writes words for this long, then queues its successor: a
# backlog is worked through without a task that outlives its time limit.
WORDS_RUN_SECONDS = 60


@shared_task(acks_late=True, soft_time_limit=WORDS_RUN_SECONDS * 3, time_limit=WORDS_RUN_SECONDS * 4)
def index_owed_words() -> int:
    """Write the search words stored messages owe, batch by batch, passing over batches
    another run holds."""
    started, total = time.monotonic(), 0
    while indexed := contents_index_words(skip_locked=True):
        total += indexed
        if time.monotonic() - started > WORDS_RUN_SECONDS:
            index_owed_words.delay()
            break
    if total:
        logger.info("wrote the search words of %d stored message(s)", total)
    return total


@shared_task(acks_late=True, soft_time_limit=3000, time_limit=3300)
def reconcile_report() -> int:
    """Daily: log how many backend accounts no live mailbox owns (`manage.py reconcile --destroy` removes them)."""
    try:
        orphans = orphans_find(domains=settings.RELAY_DOMAINS)
    except NothingToReconcile:
        return 0
    if orphans:
        logger.warning(
            "%d backend account(s) are owned by no live mailbox; `manage.py reconcile` lists them, "
            "`--destroy` removes them", len(orphans))
    return len(orphans)


# The task ends before the poll's lock lapses; no `expires`, which a fast worker's clock
# would judge (docs/architecture.md, "One clock").
@shared_task(soft_time_limit=mailserver.reader.POLL_LOCK_SECONDS - 5,
             time_limit=mailserver.reader.POLL_LOCK_SECONDS - 2)
def read_mail_server() -> int:
    """Beat, with a mail server as the backend: copy what it delivered into Relay's store
    (relay.mailserver.poll). Safe to overlap."""
    stored = mailserver.poll()
    if stored:
        logger.info("read %d message(s) from the mail server", stored)
    return stored
