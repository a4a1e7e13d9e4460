"""Every Redis client Relay builds, and how long each waits: the events Redis
(RELAY_EVENTS_REDIS_URL: revocations, wake-ups, the open-wait count, the wait hub's
subscription) and the backend limiter's."""
import functools

import redis
import redis.asyncio as aioredis
from django.conf import settings


@functools.cache
def redis_client(url: str, *, timeout: float) -> redis.Redis:
    """This process's client of `url`, whose connects and replies give up after `timeout`
    seconds. One per URL and timeout: its pool reconnects by itself, and after a fork."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def events_redis(*, timeout: float) -> redis.Redis | None:
    """The events Redis's client, or None when RELAY_EVENTS_REDIS_URL is empty."""
    url = settings.RELAY_EVENTS_REDIS_URL
    return redis_client(url, timeout=timeout) if url else None


def events_subscription_client(*, connect_timeout: float) -> aioredis.Redis:
    """A new asyncio client of the events Redis for one subscription (the caller closes it):
    a subscription's reads wait for as long as nothing is published, so only connecting
    has a timeout."""
    return aioredis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL, socket_connect_timeout=connect_timeout)
