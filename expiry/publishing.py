"""Queueing cleanup tasks. The one place expire tasks are published: for cleanups that
became owed (on mailboxes.ending.cleanups_owed, after commit) and for mailboxes the
sweep schedules ahead of their due instant."""
import logging
from datetime import datetime

from celery import current_app

logger = logging.getLogger(__name__)

# Looked up by name in the app's registry: expiry.tasks runs the sweep, which publishes
# through here, so an import of the task would close a circle (tasks -> sweep ->
# publishing -> tasks).
EXPIRE_TASK = "expiry.tasks.expire_mailbox"


def publish_cleanups(mailbox_ids: list, *, etas: list[datetime] | None = None) -> None:
    """Queue one expire task per mailbox, over one broker connection. A publish that
    fails is only logged: the cleanup's lease lapses and a sweep queues it again (or, for
    a scheduled one, the sweep expires the mailbox when due)."""
    expire_mailbox = current_app.tasks[EXPIRE_TASK]
    with current_app.producer_or_acquire() as producer:
        for index, mailbox_id in enumerate(mailbox_ids):
            try:
                expire_mailbox.apply_async(args=(str(mailbox_id),), eta=etas[index] if etas else None,
                                           producer=producer)
            except Exception:
                logger.exception("could not queue the cleanup of %s; the sweep will see to it", mailbox_id)


def on_cleanups_owed(sender, *, mailbox_ids: list, not_before: datetime | None = None, **kwargs) -> None:
    publish_cleanups(mailbox_ids, etas=[not_before] * len(mailbox_ids) if not_before else None)
