"""The web process's one Redis subscription (`relay:mailbox:*` and revocations), waking the
waiters of api/waiting.py; they look again every RECHECK_SECONDS anyway."""
import asyncio
import logging
from collections import defaultdict

import redis.asyncio as aioredis
from django.conf import settings

from accounts import revocations
from mailboxes.wakeups import CHANNEL_PREFIX

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.5
# A backstop only: with a live subscription no event is lost, and each (re)connect makes
# every waiter look at once.
RECHECK_SECONDS = 30.0


class Hub:
    """The waiters of this process, by mailbox id, and the one subscription that wakes them."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.listener: asyncio.Task | None = None

    def register(self, mailbox_id) -> asyncio.Event:
        if settings.RELAY_EVENTS_REDIS_URL and (self.listener is None or self.listener.done()):
            self.listener = asyncio.get_running_loop().create_task(self.listen())
        event = asyncio.Event()
        self.waiters[str(mailbox_id)].add(event)
        return event

    def unregister(self, mailbox_id, event: asyncio.Event) -> None:
        key = str(mailbox_id)
        self.waiters[key].discard(event)
        if not self.waiters[key]:
            del self.waiters[key]

    async def listen(self) -> None:
        """Read `relay:mailbox:*` for as long as anyone waits; reconnect after a failure."""
        failures = 0
        while self.waiters:
            client = aioredis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(CHANNEL_PREFIX + "*")
                    await pubsub.subscribe(revocations.CHANNEL)
                    failures = 0
                    self.wake_all()  # what happened while unsubscribed is looked at now
                    while self.waiters:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message and message["type"] == "message":
                            # A key or an account was revoked: every waiter authenticates
                            # again, and those whose key it was end.
                            self.wake_all()
                        elif message and message["type"] == "pmessage":
                            key = message["channel"].decode()[len(CHANNEL_PREFIX):]
                            for event in self.waiters.get(key, ()):
                                event.set()
            except (aioredis.RedisError, OSError) as exc:
                failures += 1
                logger.warning("lost the mailbox-event subscription (%s); reconnecting", exc)
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))
            finally:
                await client.aclose()

    def wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()

    async def wait(self, event: asyncio.Event, timeout: float) -> None:
        """Until `event` is set (then cleared) or `timeout` passes."""
        limit = RECHECK_SECONDS if settings.RELAY_EVENTS_REDIS_URL else POLL_SECONDS
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, min(timeout, limit)))
        except TimeoutError:
            pass
        event.clear()


hub = Hub()
