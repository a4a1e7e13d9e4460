"""API keys: made, revoked and looked up by their SHA-256 (256-bit random keys), with a
per-process cache (docs/api.md, "Keys and revocation")."""
import copy
import hashlib
import logging
import secrets
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from accounts import revocations
from accounts.errors import NotFound, QuotaExceeded
from accounts.models import Account, ApiKey

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


# --- key → account, cached per process while nothing is revoked ------------------------------
def _key_copy(api_key: ApiKey) -> ApiKey:
    # A model's copy shares its related objects: the account is copied on its own.
    copied = copy.copy(api_key)
    copied.account = copy.copy(api_key.account)
    return copied


_key_cache = revocations.Cache(account_of=lambda api_key: api_key.account_id, copy=_key_copy)
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
    revocations.forget_account(account_id)
    revocations.announce()


def key_cache_clear() -> None:
    revocations.clear_all()
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
