"""Credentials: API keys (made, revoked, looked up by their SHA-256), and revocation on
the very next request in every web process for every credential a process caches (API
keys, OAuth access tokens, the web inbox's sessions: `Cache`), by one Redis counter raised
after each revocation commits and a PUBLISH on `relay:revoked` (docs/api.md, "Keys and
revocation")."""
import copy
import hashlib
import logging
import secrets
import time
import weakref
from collections.abc import Callable
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from accounts.errors import NotFound, QuotaExceeded
from accounts.models import Account, ApiKey
from core.redis_clients import events_redis

logger = logging.getLogger(__name__)

API_KEY_PREFIX = "rk_"
# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def new_key(prefix: str) -> tuple[str, str]:
    """A fresh 256-bit key and the hash to store for it."""
    key = prefix + secrets.token_urlsafe(32)
    return key, hash_key(key)


def api_key_create(*, account: Account) -> tuple[ApiKey, str]:
    """A new key for `account`, in clear text this once; at most RELAY_MAX_API_KEYS live."""
    key, digest = new_key(API_KEY_PREFIX)
    with transaction.atomic():
        # The account's row lock orders concurrent creations: each counts the others'.
        list(Account.objects.select_for_update().filter(id=account.id).values_list("id", flat=True))
        if ApiKey.objects.filter(account=account, revoked_at=None).count() >= settings.RELAY_MAX_API_KEYS:
            raise QuotaExceeded(f"An account may have at most {settings.RELAY_MAX_API_KEYS} live API keys; "
                                "delete one first.", retry_after=60)
        api_key = ApiKey.objects.create(account=account, prefix=key[:10], key_hash=digest)
    logger.info("created API key %s… for account %s", api_key.prefix, account.login)
    return api_key, key


def api_key_revoke(*, account: Account, key_id: int) -> None:
    revoked = ApiKey.objects.filter(id=key_id, account=account, revoked_at=None).update(revoked_at=Now())
    key_revoked(account_id=account.id)
    if not revoked and not ApiKey.objects.filter(id=key_id, account=account).exists():
        raise NotFound()
    logger.info("revoked API key %s of account %s", key_id, account.login)


# --- revocation -------------------------------------------------------------------------------
REVOCATIONS_COUNTER = "relay:revocations"
REVOKED_CHANNEL = "relay:revoked"
# After Redis fails, this long without asking it (every request would otherwise wait
# for its timeout): keys are looked up in the database meanwhile.
REVOCATIONS_PAUSE_SECONDS = 5.0

# Every request asks: a Redis that does not answer at once counts as failing.
REVOCATIONS_TIMEOUT_SECONDS = 0.5
_paused_until = 0.0


def _revocations_redis() -> redis.Redis | None:
    return events_redis(timeout=REVOCATIONS_TIMEOUT_SECONDS)


def _revocations_redis_unless_paused() -> redis.Redis | None:
    return None if time.monotonic() < _paused_until else _revocations_redis()


def _failed(action: str, exc: Exception) -> None:
    global _paused_until
    _paused_until = time.monotonic() + REVOCATIONS_PAUSE_SECONDS
    logger.warning("could not %s the revocation counter in Redis (%s); keys are looked up on every request "
                   "for the next %.0f s", action, exc, REVOCATIONS_PAUSE_SECONDS)


def revocation_count() -> int | None:
    """The revocation counter, or None when there is none to trust (no Redis, or Redis
    failing): then nothing may be served from a cache."""
    client = _revocations_redis_unless_paused()
    if client is None:
        return None
    try:
        return int(client.get(REVOCATIONS_COUNTER) or 0)
    except (redis.RedisError, ValueError) as exc:
        _failed("read", exc)
        return None


def revocation_announce() -> None:
    """Tell every web process of a revocation once the transaction commits."""
    transaction.on_commit(_revocation_announce_now)


def _revocation_announce_now() -> None:
    client = _revocations_redis()  # even while reads are paused: a revocation is worth one slow call
    if client is None:
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.incr(REVOCATIONS_COUNTER)
            pipe.publish(REVOKED_CHANNEL, "revoked")
            pipe.execute()
    except redis.RedisError as exc:
        # The others cannot read it either, so do not cache; else their entries age out.
        logger.error("could not announce a revocation (%s): other web processes may accept the key for up to "
                     "RELAY_KEY_CACHE_SECONDS", exc)


class Cache:
    """A per-process cache of credentials (API keys, OAuth access tokens, the web inbox's
    signed-in sessions), each entry trusted while the revocation counter stands where it
    stood when the entry was made, for at most RELAY_KEY_CACHE_SECONDS, and `max_entries` of
    them. Nothing is cached without a counter to trust (no Redis, or Redis failing)."""

    every: "weakref.WeakSet[Cache]" = weakref.WeakSet()  # caches_forget_account and caches_clear_all reach each

    def __init__(self, *, account_of: Callable[[object], int | None], copy: Callable = lambda value: value,
                 max_entries: int = 10_000) -> None:
        Cache.every.add(self)
        self.account_of = account_of  # the account an entry speaks for, to forget it with the account
        self.copy = copy  # each caller its own copy, when a request may change what it gets
        self.max_entries = max_entries
        # key -> (fresh until, the counter read before the value's row was, the value)
        self.entries: dict[str, tuple[float, int, object]] = {}

    def get(self, key: str, load: Callable[[], object | None]):
        """The cached value of `key`, or `load()`'s (None: nothing live), cached when it can be."""
        lifetime = settings.RELAY_KEY_CACHE_SECONDS
        # Read before the database: a revocation committing meanwhile moves it past the entry's.
        version = revocation_count() if lifetime > 0 else None
        entry = self.entries.get(key)
        if entry is not None and version is not None and entry[1] == version and entry[0] > time.monotonic():
            return self.copy(entry[2])
        value = load()
        if value is not None and version is not None:
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[key] = (time.monotonic() + lifetime, version, self.copy(value))
        elif entry is not None:
            self.entries.pop(key, None)
        return value

    def forget(self, key: str) -> None:
        self.entries.pop(key, None)

    def forget_account(self, account_id: int) -> None:
        for key, (_, _, value) in list(self.entries.items()):
            if self.account_of(value) == account_id:
                self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries.clear()


def caches_forget_account(account_id: int) -> None:
    """This process forgets every credential it cached for the account (each other process
    before its next request, by the counter)."""
    for cache in Cache.every:
        cache.forget_account(account_id)


def caches_clear_all() -> None:
    for cache in Cache.every:
        cache.clear()


# --- key → account, cached per process while nothing is revoked ------------------------------
def _key_copy(api_key: ApiKey) -> ApiKey:
    # A model's copy shares its related objects: the account is copied on its own.
    copied = copy.copy(api_key)
    copied.account = copy.copy(api_key.account)
    return copied


_key_cache = Cache(account_of=lambda api_key: api_key.account_id, copy=_key_copy)
# key id -> when this process last wrote its last_used_at (its own monotonic clock, which
# only paces its own writes); a request within LAST_USED_RESOLUTION of it writes nothing.
_touched: dict[int, float] = {}
TOUCHED_MAX_ENTRIES = 10_000


def api_key_for_hash(digest: str) -> ApiKey | None:
    """The unrevoked key with this hash and its account, or None; cached while no revocation
    is announced, each caller with its own copy of the account."""
    return _key_cache.get(digest, lambda: ApiKey.objects.select_related("account")
                          .filter(key_hash=digest, revoked_at=None).first())


def key_revoked(*, account_id: int) -> None:
    """After a key of the account, or the account itself, was revoked or suspended: this
    process forgets its keys now, and every other process before its next request."""
    caches_forget_account(account_id)
    revocation_announce()


def key_cache_clear() -> None:
    caches_clear_all()
    _touched.clear()


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record that the key was used, at most once per LAST_USED_RESOLUTION (by the database's
    clock, in the UPDATE)."""
    if time.monotonic() - _touched.get(api_key.id, float("-inf")) < LAST_USED_RESOLUTION.total_seconds():
        return
    if len(_touched) >= TOUCHED_MAX_ENTRIES:
        _touched.clear()
    _touched[api_key.id] = time.monotonic()
    ApiKey.objects.filter(Q(last_used_at=None) | Q(last_used_at__lte=Now() - LAST_USED_RESOLUTION),
                          id=api_key.id).update(last_used_at=Now())
