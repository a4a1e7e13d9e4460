"""Mail backends: `provision(mailbox)` and `deprovision(mailbox)`, raising
TransientBackendError for what a retry may fix and PermanentBackendError otherwise; the
configured one (`get_backend`), and what a call can fail with."""
import functools
from collections.abc import Iterator
from typing import Protocol

from django.conf import settings

from mailboxes.errors import AccountNotRelays, BackendFailure
from relay.metrics import BACKEND_CALLS


# --- what a call can fail with --------------------------------------------------------------------
class BackendError(BackendFailure):
    """Anything a backend call can fail with; one of the two kinds below."""


class TransientBackendError(BackendError):
    """A retry may fix it: a timeout, a 5xx, a rate limit. `retry_after`: seconds the
    backend asked us to wait (its Retry-After), if it said."""

    def __init__(self, message: str = "", *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class NoBackendSlot(TransientBackendError):
    """The limiter had no slot within its wait: no call was made, so it is no retry."""


class PermanentBackendError(BackendError):
    """A retry will not fix it: bad credentials, a rejected request."""


class AccountExists(PermanentBackendError, AccountNotRelays):
    """Provisioning found the account already there: not Relay's, never taken over."""


class NotMadeByRelay(PermanentBackendError):
    """A deprovision found an account without Relay's mark for that mailbox: left alone,
    for an operator to look at (the cleanup ends dead, reconcile reports it failed)."""


class NothingToReconcile(Exception):
    """The backend keeps no accounts apart from Relay's rows (the local backend)."""


# How a failed call ended, as /metrics labels it; the first class that matches wins
# (NoBackendSlot is a TransientBackendError that made no call).
_ENDINGS = ((NoBackendSlot, "no_slot"), (PermanentBackendError, "permanent"), (TransientBackendError, "transient"))


def _ended(exc: Exception) -> str:
    return next((label for kind, label in _ENDINGS if isinstance(exc, kind)), "error")


def counted_backend_call(operation: str):
    """Count each call of the decorated backend method by how it ended: ok, transient
    (retried), permanent (a dead letter), no_slot (Relay's limiter had none; not tried)."""
    def decorate(method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            try:
                result = method(*args, **kwargs)
            except Exception as exc:
                BACKEND_CALLS.labels(operation, _ended(exc)).inc()
                raise
            BACKEND_CALLS.labels(operation, "ok").inc()
            return result
        return call
    return decorate


# --- a backend ------------------------------------------------------------------------------------
class MailboxLike(Protocol):
    address: str
    backend_id: str


class MailBackend(Protocol):
    name: str
    # Whether provision() makes something outside Relay a crash could orphan.
    keeps_accounts: bool
    # The longest one provision() may take: a provisioning mailbox is leased at least this long.
    provision_seconds_max: float

    # Whether the backend's accounts are named by local part alone, whatever the domain
    # (Cyrus): then a local part is unique across RELAY_DOMAINS.
    one_account_per_local_part: bool

    def reserved_names(self) -> set[str]:
        """Local parts the backend keeps for itself (its admin, its own accounts): never
        handed out, whatever RELAY_RESERVED_LOCAL_PARTS says."""
        ...

    def provision(self, mailbox: MailboxLike) -> str: ...

    def deprovision(self, mailbox: MailboxLike) -> None: ...

    def accounts(self, domain: str) -> Iterator[tuple[str, str]]:
        """Every account the backend holds in `domain`, as (backend id, address), page by
        page. Raises NothingToReconcile where the backend keeps no accounts of its own."""
        ...


@functools.lru_cache(maxsize=8)
def _backend(name: str, *where: str) -> MailBackend:
    if name == "stalwart":
        from relay.backends.stalwart import StalwartBackend

        url, token = where[:2]
        return StalwartBackend(base_url=url, token=token, timeout=settings.STALWART_TIMEOUT)
    if name == "cyrus":
        from relay.backends.cyrus import CyrusBackend

        imap_url, jmap_url, admin, password = where[2:]
        return CyrusBackend(imap_url=imap_url, jmap_url=jmap_url, admin=admin, password=password,
                            timeout=settings.CYRUS_TIMEOUT_SECONDS)
    from relay.backends.local import LocalBackend

    return LocalBackend()


def get_backend() -> MailBackend:
    """The configured backend, one instance per process (it keeps an HTTP session)."""
    return _backend(settings.RELAY_BACKEND, settings.STALWART_URL, settings.STALWART_TOKEN, settings.CYRUS_IMAP_URL,
                    settings.CYRUS_JMAP_URL, settings.CYRUS_ADMIN_USER, settings.CYRUS_ADMIN_PASSWORD)


def keeps_accounts() -> bool:
    """Whether the backend is a mail server with accounts of its own (Cyrus, Stalwart): the
    one answer to "does this backend call a server"."""
    return get_backend().keeps_accounts


def mail_store():
    """The configured backend if it holds the mail (Cyrus, Stalwart: relay/mailserver/
    reads it over JMAP), else None (the local backend: Relay's own SMTP stores it)."""
    backend = get_backend()
    return backend if backend.keeps_accounts else None
