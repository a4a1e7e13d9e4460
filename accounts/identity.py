"""Who is calling, for every door (the API, MCP over HTTP and stdio, the web inbox, SMTP
submission): each credential (an API key, an anonymous mailbox's token, an OAuth access
token, the web inbox's session, a sandbox's SMTP login) parsed here into one `Caller` by `authenticate`; one rule
for whether an account may act (`may_act`, and the error that refuses it); one digest of
every secret (`secret_digest`); and how long a process may keep believing a credential it
looked up (`Cache`, revocation on the next request: docs/api.md, "Keys and revocation").
Django's `django.contrib.auth.authenticate` is the model: a door asks `authenticate` and
checks nothing about the credential or its account itself."""
import copy
import hashlib
import logging
import secrets
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import DurationField, Exists, ExpressionWrapper, F, Q
from django.db.models.functions import Now
from oauth2_provider.models import get_access_token_model

from accounts.errors import AccountSuspended, Forbidden
from accounts.models import Account, AccountStatus, ApiKey, Plan
from core.redis_clients import events_redis

logger = logging.getLogger(__name__)

API_KEY_PREFIX = "rk_"
MAILBOX_TOKEN_PREFIX = "rt_"
SMTP_PASSWORD_PREFIX = "rs_"


# --- secrets ----------------------------------------------------------------------------------
def secret_digest(secret: str | bytes) -> str:
    """The SHA-256 of a secret, in hex: what is stored and looked up for every credential
    (API keys, mailbox tokens, OAuth access tokens, one-time tokens and their codes). Each
    is 256 bits of randomness, so a fast hash is enough and a look-up stays one indexed
    equality."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8", "surrogatepass")
    return hashlib.sha256(secret).hexdigest()


def new_secret(prefix: str) -> tuple[str, str]:
    """A fresh 256-bit secret and the digest to store for it."""
    secret = prefix + secrets.token_urlsafe(32)
    return secret, secret_digest(secret)


def new_mailbox_token() -> tuple[str, str]:
    """A fresh anonymous mailbox token and the digest to store for it."""
    return new_secret(MAILBOX_TOKEN_PREFIX)


def new_smtp_password() -> tuple[str, str]:
    """A fresh sandbox SMTP password (shown once) and the digest to store for it."""
    return new_secret(SMTP_PASSWORD_PREFIX)


# --- the caller -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Caller:
    """Who asks. `owner` (an Account) for an API key, an access token or a session;
    `mailbox_id` for an anonymous mailbox token, which authorizes that one mailbox and
    nothing else."""

    owner: Account | None = None
    mailbox_id: uuid.UUID | None = None
    api_key_id: int | None = None
    # What an OAuth access token was granted (docs/agents.md, "Scopes"); None: everything
    # the owner may do (an API key, a mailbox token, a session).
    scopes: frozenset[str] | None = None

    def may(self, scope: str | None) -> bool:
        """Whether this caller's grant covers `scope` (None: a route no token may use)."""
        return self.scopes is None or (scope is not None and scope in self.scopes)

    @property
    def is_anonymous(self) -> bool:
        return self.owner is None

    @property
    def plan(self) -> str:
        return self.owner.plan if self.owner else Plan.FREE


# --- may this account act ---------------------------------------------------------------------
SUSPENDED = "This account is suspended; its keys are refused until it is unsuspended."
NOT_ACTIVE = "This account is not active."
# The same rule as `may_act`, for a query.
MAY_ACT = Q(status=AccountStatus.ACTIVE)


def may_act(status: str) -> bool:
    """Whether an account in `status` may act: use its credentials, sign in, have its
    mailboxes take mail. Only an active one may (not one awaiting activation, not a
    suspended one)."""
    return status == AccountStatus.ACTIVE


def refusal(status: str) -> Forbidden | None:
    """The error every door answers for an account in `status` that may not act (403: the
    credential is right, its account is not), or None when it may."""
    if may_act(status):
        return None
    return AccountSuspended(SUSPENDED) if status == AccountStatus.SUSPENDED else Forbidden(NOT_ACTIVE)


# --- revocation -------------------------------------------------------------------------------
REVOCATIONS_COUNTER = "relay:revocations"
REVOKED_CHANNEL = "relay:revoked"
# After Redis fails, this long without asking it (every request would otherwise wait
# for its timeout): credentials are looked up in the database meanwhile.
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
    stood when the entry was made, for at most RELAY_KEY_CACHE_SECONDS (and at most
    `lifetime_of(value)` seconds: what the database said was left of it), and `max_entries`
    of them. Nothing is cached without a counter to trust (no Redis, or Redis failing)."""

    every: "weakref.WeakSet[Cache]" = weakref.WeakSet()  # caches_forget_account and caches_clear_all reach each

    def __init__(self, *, account_of: Callable[[object], int | None], copy: Callable = lambda value: value,
                 lifetime_of: Callable[[object], float] | None = None, max_entries: int = 10_000) -> None:
        Cache.every.add(self)
        self.account_of = account_of  # the account an entry speaks for, to forget it with the account
        self.copy = copy  # each caller its own copy, when a request may change what it gets
        self.lifetime_of = lifetime_of
        self.max_entries = max_entries
        # key -> (fresh until, the counter read before the value's row was, the value)
        self.entries: dict[str, tuple[float, int, object]] = {}

    def get(self, key: str, load: Callable[[], object | None]):
        """The cached value of `key`, or `load()`'s (None: nothing live), cached when it can be."""
        lifetime = settings.RELAY_KEY_CACHE_SECONDS
        # Read before the database: a revocation committing meanwhile moves it past the entry's.
        version = revocation_count() if lifetime > 0 else None
        entry = self.entries.get(key)
        # This process's own clock only times how long it has held what the database said.
        asked_at = time.monotonic()
        if entry is not None and version is not None and entry[1] == version and entry[0] > asked_at:
            return self.copy(entry[2])
        value = load()
        if value is not None and self.lifetime_of is not None:
            lifetime = min(lifetime, self.lifetime_of(value))
        if value is not None and version is not None and lifetime > 0:
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[key] = (asked_at + lifetime, version, self.copy(value))
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
    _touched.clear()


# --- API keys ---------------------------------------------------------------------------------
# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


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
    """The unrevoked key with this digest and its account, or None; cached while no
    revocation is announced, each caller with its own copy of the account."""
    return _key_cache.get(digest, lambda: ApiKey.objects.select_related("account")
                          .filter(key_hash=digest, revoked_at=None).first())


def api_key_touch(*, key_id: int) -> None:
    """Record that the key was used, at most once per LAST_USED_RESOLUTION (by the database's
    clock, in the UPDATE)."""
    if time.monotonic() - _touched.get(key_id, float("-inf")) < LAST_USED_RESOLUTION.total_seconds():
        return
    if len(_touched) >= TOUCHED_MAX_ENTRIES:
        _touched.clear()
    _touched[key_id] = time.monotonic()
    ApiKey.objects.filter(Q(last_used_at=None) | Q(last_used_at__lte=Now() - LAST_USED_RESOLUTION),
                          id=key_id).update(last_used_at=Now())


def _api_key(secret: str, audience: str | None) -> Caller | None:
    api_key = api_key_for_hash(secret_digest(secret))
    return None if api_key is None else Caller(owner=api_key.account, api_key_id=api_key.id)


# --- anonymous mailbox tokens -----------------------------------------------------------------
# A token names a mailbox, which mailboxes/ (an app above this one) owns: it hands its look-up
# down once it is ready (mailboxes/apps.py), as Django's auth is handed its backends. Until
# then no token opens anything.
_mailbox_of_token: Callable[[str], uuid.UUID | None] = lambda digest: None


def mailbox_tokens_read_by(lookup: Callable[[str], uuid.UUID | None]) -> None:
    """`lookup(digest)`: the id of the mailbox a token's digest opens, or None."""
    global _mailbox_of_token
    _mailbox_of_token = lookup


def _mailbox_token(secret: str, audience: str | None) -> Caller | None:
    mailbox_id = _mailbox_of_token(secret_digest(secret))
    return Caller(mailbox_id=mailbox_id) if mailbox_id else None


# --- OAuth access tokens ----------------------------------------------------------------------
def _token_account_id(token) -> int | None:
    account = getattr(token.user, "relay_account", None) if token.user_id else None
    return account.id if account is not None else None


# checksum -> a live token with its user's account and what the database said was left of
# its life, so a cached token lapses when its expiry passes by the database's clock.
_token_cache = Cache(account_of=_token_account_id,
                     lifetime_of=lambda token: token.life_left.total_seconds())


def _live_token(checksum: str):
    # The database's clock decides whether it has expired: a web host's clock behind
    # another's would otherwise keep a token alive that the other refuses.
    return _token_cache.get(checksum, lambda: get_access_token_model().objects.select_related("user__relay_account")
                            .filter(token_checksum=checksum, expires__gt=Now())
                            .annotate(life_left=ExpressionWrapper(F("expires") - Now(), output_field=DurationField()))
                            .first())


def access_token_forget(checksum: str) -> None:
    """This process forgets a revoked access token now (the others by the counter)."""
    _token_cache.forget(checksum)


def token_grant(secret: str, audience: str) -> tuple[Account, frozenset[str]] | None:
    """(account, scopes) of a live access token bound to `audience`, or None: unknown,
    expired (by the database's clock), revoked, or minted for another resource (an unbound
    token is refused too)."""
    token = _live_token(secret_digest(secret))
    if token is None or not token.resource or not token.allows_audience(audience):
        return None
    account = getattr(token.user, "relay_account", None) if token.user_id else None
    if account is None:
        return None
    # Each caller its own copy: a request may change its account's fields.
    return copy.copy(account), frozenset(token.scope.split())


def _access_token(secret: str, audience: str | None) -> Caller | None:
    grant = token_grant(secret, audience) if audience is not None else None
    return None if grant is None else Caller(owner=grant[0], scopes=grant[1])


# --- the web inbox's sessions -----------------------------------------------------------------
@dataclass(frozen=True)
class Session:
    """A web inbox session: the account signed in, and the API key it signed in with
    (None: by a mailed code or link), which must stay live for the session to."""

    account_id: int
    api_key_id: int | None = None


def _signed_in(session: Session) -> Account | None:
    """The account, while the key it signed in with (if any) is live."""
    live_key = ApiKey.objects.filter(id=session.api_key_id, account_id=session.account_id, revoked_at=None)
    account = Account.objects.filter(id=session.account_id).annotate(key_live=Exists(live_key)).first()
    return None if account is None or (session.api_key_id is not None and not account.key_live) else account


# "account id:key id" -> the signed-in account, cached as API keys are (a suspension or a
# revocation forgets it here and, by the counter, in every other process).
_sessions = Cache(account_of=lambda account: account.id, copy=copy.copy)


def _session(session: Session, audience: str | None) -> Caller | None:
    account = _sessions.get(f"{session.account_id}:{session.api_key_id}", lambda: _signed_in(session))
    return None if account is None else Caller(owner=account, api_key_id=session.api_key_id)


# --- a sandbox's SMTP login ------------------------------------------------------------------
@dataclass(frozen=True)
class SmtpLogin:
    """What AUTH PLAIN or LOGIN gave the submission port: a sandbox's address and its password."""

    username: str
    password: str = field(repr=False)


# A sandbox is a mailbox, which mailboxes/ owns: it hands its look-up down as it does the
# tokens' (mailboxes/apps.py). `lookup(address, digest)`: (the id, its owner or None) of the
# sandbox that receives now, by the database's clock, with that password; else None.
_sandbox_of_login: Callable[[str, str], "tuple[uuid.UUID, Account | None] | None"] = lambda address, digest: None


def sandbox_logins_read_by(lookup: Callable[[str, str], "tuple[uuid.UUID, Account | None] | None"]) -> None:
    global _sandbox_of_login
    _sandbox_of_login = lookup


def _smtp_login(login: SmtpLogin, audience: str | None) -> Caller | None:
    # Looked up in the database on every AUTH, never cached: a rotated password, or a
    # sandbox deleted or ended, fails at once in every SMTP process. An AUTH costs one
    # indexed read, once per connection.
    if not login.password.startswith(SMTP_PASSWORD_PREFIX):
        return None
    found = _sandbox_of_login(login.username.strip().lower(), secret_digest(login.password))
    if found is None:
        return None
    mailbox_id, owner = found
    # An SMTP login opens one sandbox for submission and nothing of the API (no scope).
    return Caller(owner=owner, mailbox_id=mailbox_id, scopes=frozenset())


# --- authenticate -----------------------------------------------------------------------------
API_KEY, MAILBOX_TOKEN, ACCESS_TOKEN, SESSION = "API key", "mailbox token", "access token", "session"
SMTP_LOGIN = "SMTP login"
# What the HTTP doors take; the submission port asks for SMTP_LOGIN alone.
EVERY_KIND = frozenset({API_KEY, MAILBOX_TOKEN, ACCESS_TOKEN, SESSION})
_BACKENDS = {API_KEY: _api_key, MAILBOX_TOKEN: _mailbox_token, ACCESS_TOKEN: _access_token, SESSION: _session,
             SMTP_LOGIN: _smtp_login}


def credential_kind(credential: "str | Session | SmtpLogin", *, audience: str | None = None) -> str | None:
    """What a credential is, by its shape alone: a session, an SMTP login, an API key
    (`rk_…`), a mailbox token (`rt_…`), or, where an audience is named, an OAuth access
    token; None for none."""
    if isinstance(credential, Session):
        return SESSION
    if isinstance(credential, SmtpLogin):
        return SMTP_LOGIN
    if credential.startswith(API_KEY_PREFIX):
        return API_KEY
    if credential.startswith(MAILBOX_TOKEN_PREFIX):
        return MAILBOX_TOKEN
    return ACCESS_TOKEN if audience is not None else None


def authenticate(credential: "str | Session | SmtpLogin", *, audience: str | None = None,
                 kinds: Iterable[str] = EVERY_KIND) -> Caller | None:
    """The caller a credential belongs to, or None: unknown, revoked, expired, bound to
    another audience, or not one of `kinds`. An account that may not act raises its
    `refusal` (403: the credential is right). `audience`: where a secret was presented
    (RELAY_API_RESOURCE, RELAY_MCP_RESOURCE), which an OAuth access token must be bound to;
    without one no access token is taken."""
    kind = credential_kind(credential, audience=audience)
    if kind is None or kind not in kinds:
        return None
    caller = _BACKENDS[kind](credential, audience)
    if caller is None or caller.owner is None:
        return caller
    refused = refusal(caller.owner.status)
    if refused is not None:
        raise refused
    if kind == API_KEY:
        api_key_touch(key_id=caller.api_key_id)
    return caller
