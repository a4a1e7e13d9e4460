"""The submission port's rules, without a socket (docs/sandbox.md): who a sandbox's SMTP
login is, by accounts.identity like every other credential, and the lock-out of a client
group that keeps guessing passwords, counted in the events Redis so every SMTP process
shares it."""
import logging
import threading
import time
import uuid
from dataclasses import dataclass

import redis

from accounts.errors import Forbidden
from accounts.identity import SMTP_LOGIN, SmtpLogin, authenticate
from core.redis_clients import events_redis
from mailboxes.faults import fault_rules_of
from mailboxes.messages import Recipient, recipient_by_address
from mailboxes.models import FaultRule

logger = logging.getLogger(__name__)

# RFC 4954's advice against guessing, as docs/sandbox.md states it: ten failed AUTHs from
# one client group within ten minutes, and every AUTH from it is refused for ten minutes.
FAILURES_ALLOWED = 10
LOCKOUT_SECONDS = 600
FAILURES_KEY = "relay:smtp-auth-failures:"
# The lock-out is asked before every AUTH: a Redis that does not answer at once is failing.
REDIS_TIMEOUT_SECONDS = 0.5
# One round trip counts a failure and starts (or, at the limit, restarts) its window.
_COUNT_FAILURE = """
local failures = redis.call('INCR', KEYS[1])
if failures == 1 or failures >= tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return failures
"""


class LockoutUnknown(Exception):
    """The failure count could not be read: AUTH is refused as a temporary failure."""


@dataclass(frozen=True)
class SandboxLogin:
    """A session's AUTH that succeeded: the sandbox it submits to."""

    mailbox_id: uuid.UUID
    address: str


def sandbox_login(*, username: str, password: str) -> SandboxLogin | None:
    """The sandbox this login opens, or None: unknown address, wrong or rotated password,
    a sandbox deleted or past its time (by the database's clock), or an owner that may
    not act; each the same None, so a client learns nothing of which sandboxes exist."""
    try:
        caller = authenticate(SmtpLogin(username=username, password=password), kinds={SMTP_LOGIN})
    except Forbidden:
        return None
    return None if caller is None else SandboxLogin(mailbox_id=caller.mailbox_id, address=username.strip().lower())


def sandbox_transaction(*, login: SandboxLogin) -> tuple[Recipient | None, list[FaultRule]]:
    """At each MAIL FROM, in one trip to the lookup pool: the signed-in sandbox as a
    recipient, None once it has ended or been deleted (it takes nothing more), and its
    fault rules (a PUT applies from the next transaction)."""
    sandbox = recipient_by_address(login.address)
    if sandbox is None or sandbox.mailbox_id != login.mailbox_id:
        return None, []
    return sandbox, fault_rules_of(login.mailbox_id)


# Without an events Redis (a single-host `make run` may have none), each process counts alone.
_local_failures: dict[str, tuple[int, float]] = {}
_local_lock = threading.Lock()


def logins_locked(group: str) -> bool:
    """Whether AUTH from this client group is locked out now. LockoutUnknown when Redis fails."""
    client = events_redis(timeout=REDIS_TIMEOUT_SECONDS)
    if client is None:
        with _local_lock:
            failures, until = _local_failures.get(group, (0, 0.0))
            return failures >= FAILURES_ALLOWED and until > time.monotonic()
    try:
        return int(client.get(FAILURES_KEY + group) or 0) >= FAILURES_ALLOWED
    except (redis.RedisError, ValueError) as exc:
        raise LockoutUnknown() from exc


def login_failed(group: str) -> None:
    """Count a failed AUTH from this client group (a lost count is logged, not raised: the
    client has its 535 either way)."""
    client = events_redis(timeout=REDIS_TIMEOUT_SECONDS)
    if client is None:
        with _local_lock:
            failures, until = _local_failures.get(group, (0, 0.0))
            if until <= time.monotonic():
                failures = 0
            failures += 1
            if failures == 1 or failures >= FAILURES_ALLOWED:
                until = time.monotonic() + LOCKOUT_SECONDS
            if len(_local_failures) > 100_000:
                _local_failures.clear()
            _local_failures[group] = (failures, until)
        return
    try:
        client.eval(_COUNT_FAILURE, 1, FAILURES_KEY + group, LOCKOUT_SECONDS, FAILURES_ALLOWED)
    except redis.RedisError as exc:
        logger.warning("could not count a failed SMTP AUTH from %s in Redis: %s", group, exc)
