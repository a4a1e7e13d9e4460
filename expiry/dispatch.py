"""Which Celery task runs which cleanup, and when: queued once the transaction that ended
the mailboxes commits (a failed publish is the sweep's to redo)."""
import logging
import time
from datetime import datetime, timedelta

from celery import current_app
from django.db import transaction

from relay import task_names
from relay.backends import keeps_accounts

logger = logging.getLogger(__name__)

# expiry/tasks.py imports the modules that import this one: its tasks are sent by name.
EXPIRE_TASK = task_names.EXPIRE_MAILBOX
EXPIRE_BATCH_TASK = task_names.EXPIRE_MAILBOXES
# Cleanups one batch task runs where a deprovision calls no server.
CLEANUP_BATCH = 200
# Scheduled cleanups due within this span of the first share one task, run at the last
# one's instant: none runs early, none waits longer than this for the others.
SCHEDULED_BATCH_SPAN = timedelta(milliseconds=50)


def cleanups_per_task() -> int:
    """A batch where a deprovision calls no server, else one per task."""
    return 1 if keeps_accounts() else CLEANUP_BATCH


def publish_cleanups(mailbox_ids: list, *, etas: list[datetime] | None = None, batch: int | None = None) -> None:
    """Queue the expire tasks of these cleanups over one connection (`etas`: each at its
    mailboxes' due instant)."""
    batch = batch or cleanups_per_task()
    if etas:
        tasks = _scheduled_batches(mailbox_ids, etas, batch)
    else:
        tasks = ((mailbox_ids[start:start + batch], None) for start in range(0, len(mailbox_ids), batch))
    with current_app.producer_or_acquire() as producer:
        for task_ids, eta in tasks:
            ids = [str(mailbox_id) for mailbox_id in task_ids]
            try:
                if batch == 1:
                    current_app.send_task(EXPIRE_TASK, args=(ids[0],), eta=eta, producer=producer)
                else:
                    current_app.send_task(EXPIRE_BATCH_TASK, args=(ids,), kwargs={"expire_due": True} if eta else {},
                                          eta=eta, producer=producer)
            except Exception:
                logger.exception("could not queue the cleanup of %s; the sweep will see to it", ", ".join(ids))


def _scheduled_batches(mailbox_ids: list, etas: list[datetime], batch: int):
    """(ids, eta) per task, in the order they fall due: at most `batch` and at most
    SCHEDULED_BATCH_SPAN apart, to run at the last one's instant."""
    ids, first, last = [], None, None
    for mailbox_id, eta in sorted(zip(mailbox_ids, etas), key=lambda pair: pair[1]):
        if ids and (len(ids) == batch or eta - first > SCHEDULED_BATCH_SPAN):
            yield ids, last
            ids = []
        if not ids:
            first = eta
        ids.append(mailbox_id)
        last = eta
    if ids:
        yield ids, last


def queue_cleanups_after_commit(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Queue these cleanups once the transaction commits: a worker must never look for a
    pending cleanup that is not in the database yet."""
    if mailbox_ids:
        ids = list(mailbox_ids)
        etas = [not_before] * len(ids) if not_before else None
        transaction.on_commit(lambda: publish_cleanups(ids, etas=etas))


def on_mailboxes_ended(sender, *, mailbox_ids: list, not_before: datetime | None = None, **kwargs) -> None:
    """The receiver of mailboxes.signals.mailboxes_ended (connected in apps.py)."""
    queue_cleanups_after_commit(mailbox_ids, not_before=not_before)


# A broker that cannot say how long a queue is gets one warning a minute, not one a sweep.
_QUEUE_LENGTH_WARN_EVERY_SECONDS = 60
_last_queue_length_warning = 0.0


def queue_length(name: str) -> int | None:
    """Messages waiting in queue `name` (0 when empty), or None when the broker cannot answer."""
    global _last_queue_length_warning
    try:
        with current_app.connection_for_read() as conn:
            # One try: a sweep must not wait out the reconnect backoff for a figure it can do without.
            conn.ensure_connection(max_retries=0)
            try:
                return conn.default_channel.queue_declare(queue=name, passive=True).message_count
            except conn.channel_errors:
                return 0
    except Exception:
        if time.monotonic() - _last_queue_length_warning > _QUEUE_LENGTH_WARN_EVERY_SECONDS:
            _last_queue_length_warning = time.monotonic()
            logger.warning("could not read the length of queue %s", name, exc_info=True)
        return None
