"""Wake-ups for waiting clients: a Redis PUBLISH on `relay:mailbox:<id>` after a message
commits or a mailbox ends, only a nudge (waiters read the database); nothing without Redis."""
import logging
import time

import redis
from django.db import transaction

from core.redis_clients import events_redis

logger = logging.getLogger(__name__)

CHANNEL_PREFIX = "relay:mailbox:"
TIMEOUT_SECONDS = 2
_last_warning = 0.0


def channel(mailbox_id) -> str:
    return f"{CHANNEL_PREFIX}{mailbox_id}"


def publish(mailbox_ids, event: str) -> None:
    """PUBLISH `event` for each mailbox now (call after commit)."""
    global _last_warning
    client = events_redis(timeout=TIMEOUT_SECONDS)
    if client is None or not mailbox_ids:
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            for mailbox_id in mailbox_ids:
                pipe.publish(channel(mailbox_id), event)
            pipe.execute()
    except redis.RedisError as exc:
        # Once a minute at most: waiters still see the change on their next look.
        if time.monotonic() - _last_warning > 60:
            _last_warning = time.monotonic()
            logger.warning("could not publish mailbox events (%s); waiters fall back to looking every few seconds",
                           exc)


def publish_on_commit(mailbox_ids, event: str) -> None:
    """PUBLISH `event` for each mailbox once the transaction commits."""
    ids = list(mailbox_ids)
    transaction.on_commit(lambda: publish(ids, event))
