"""How much of the checks that call outside one caller may ask for (docs/checks.md,
"Bounds"): at most so many at once and so many a minute, per account (a mailbox without
an owner counts alone). Those at once are kept in the events Redis so that every web
process counts the same (in this process when there is none); those a minute are
core.rate_limits' windows. A spam check holds spamd for up to its timeout and a link
check sends up to a few hundred requests to sites the message names: without a bound per
caller, one account's checks take the capacity everyone shares."""
import logging
import threading
import uuid
from collections import Counter
from contextlib import contextmanager

import redis

from core.rate_limits import rate_limit_take
from core.redis_clients import events_redis
from mailboxes.errors import RateLimited
from mailboxes.models import Mailbox

logger = logging.getLogger(__name__)

KEY_PREFIX = "relay:checks:"
REDIS_TIMEOUT = 2

_local_lock = threading.Lock()
_local: Counter[str] = Counter()


def caller_of(mailbox: Mailbox) -> str:
    return f"account:{mailbox.owner_id}" if mailbox.owner_id else f"mailbox:{mailbox.id}"


def _redis() -> redis.Redis | None:
    return events_redis(timeout=REDIS_TIMEOUT)


def rate_take(*, kind: str, caller: str, per_minute: int) -> None:
    """Count one `kind` check for `caller` (core.rate_limits: a window of a minute from its
    first); RateLimited past `per_minute`."""
    retry_after = rate_limit_take(scope=f"checks-{kind}", ident=caller, rate=f"{per_minute}/min")
    if retry_after:
        raise RateLimited(f"At most {per_minute} {kind} checks a minute per account; try again in {retry_after} s.",
                          retry_after=retry_after)


@contextmanager
def at_once(*, kind: str, caller: str, limit: int, lease: int):
    """Hold one of `caller`'s `limit` places for a `kind` check for the block (RateLimited
    when all are taken). A place a killed process never gave back lapses after `lease`
    seconds, longer than a check may take."""
    key = f"{KEY_PREFIX}{kind}:open:{caller}"
    client = _redis()
    if client is None:
        with _local_lock:
            if _local[key] >= limit:
                raise _busy(kind, limit, lease)
            _local[key] += 1
        try:
            yield
        finally:
            with _local_lock:
                _local[key] -= 1
        return
    member = uuid.uuid4().hex
    try:
        now = float(client.time()[0])
        with client.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {member: now + lease})
            pipe.zcard(key)
            pipe.expire(key, lease)
            _, _, open_now, _ = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("could not count open %s checks in Redis (%s); letting this one through", kind, exc)
        yield
        return
    try:
        if open_now > limit:
            raise _busy(kind, limit, lease)
        yield
    finally:
        try:
            client.zrem(key, member)
        except redis.RedisError:
            pass  # lapses after the lease


def _busy(kind: str, limit: int, lease: int) -> RateLimited:
    return RateLimited(f"At most {limit} {kind} checks at once per account; try again when one is done.",
                       retry_after=min(lease, 10))
