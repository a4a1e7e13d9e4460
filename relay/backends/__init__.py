"""Mail backends: where a mailbox's principal lives. See docs/architecture.md.

A backend has two calls, `provision(mailbox)` and `deprovision(mailbox)`. Both raise
TransientBackendError for what a retry may fix (timeouts, 5xx, rate limits) and
PermanentBackendError for what it will not (bad credentials, a rejected request).
`provision` returns the backend's id for the principal ("" when it has none).
"""
from functools import lru_cache
from collections.abc import Iterator
from typing import Protocol

from django.conf import settings


class BackendError(Exception):
    """Anything a backend call can fail with; one of the two kinds below."""


class TransientBackendError(BackendError):
    """A retry may fix it: a timeout, a 5xx, a rate limit. `retry_after`: seconds the
    backend asked us to wait (its Retry-After), if it said."""

    def __init__(self, message: str = "", *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class NoBackendSlot(TransientBackendError):
    """Relay's own limiter (relay/limiter.py) had no slot for a call within the wait it
    allows: the call was not made. Waiting for a slot is not a retry: a cleanup that
    meets this is put back unattempted and comes back after `retry_after` seconds."""


class PermanentBackendError(BackendError):
    """A retry will not fix it: bad credentials, a rejected request."""


def retry_wait_max_seconds(retries: int) -> float:
    """The longest the cleanups' exponential backoff waits before retry number retries+1:
    Celery's formula for retry_backoff=RELAY_CLEANUP_RETRY_BACKOFF_SECONDS and
    retry_backoff_max=RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS (expiry.tasks); jitter
    only shortens it. Reconcile retries its destroys by the same rule."""
    return min(settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS,
               settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS * (2 ** retries))


class MailboxLike(Protocol):
    address: str
    backend_id: str


class MailBackend(Protocol):
    name: str
    # Whether provision() makes something outside Relay (an account on a mail server)
    # that a crash could leave without an owner. Only then is a mailbox written as
    # `provisioning` first (relay/provisioning.py).
    keeps_accounts: bool
    # The longest one provision() call can take, all its requests and timeouts together.
    # A mailbox being provisioned is leased for at least this long, so a sweep never
    # gives up on it (and deprovisions) while the backend may still be creating it.
    provision_seconds_max: float

    def provision(self, mailbox: MailboxLike) -> str: ...

    def deprovision(self, mailbox: MailboxLike) -> None: ...

    def accounts(self, domain: str) -> Iterator[tuple[str, str]]:
        """Every account the backend holds in `domain`, as (backend id, address), page by
        page. Raises NothingToReconcile where the backend keeps no accounts of its own."""
        ...


class NothingToReconcile(Exception):
    """The backend keeps no accounts apart from Relay's rows (the local backend)."""


@lru_cache(maxsize=8)
def _backend(name: str, url: str, token: str) -> MailBackend:
    if name == "stalwart":
        from relay.backends.stalwart import StalwartBackend

        return StalwartBackend(base_url=url, token=token, timeout=settings.STALWART_TIMEOUT)
    from relay.backends.local import LocalBackend

    return LocalBackend()


def get_backend() -> MailBackend:
    """The configured backend, one instance per process (it keeps an HTTP session)."""
    return _backend(settings.RELAY_BACKEND, settings.STALWART_URL, settings.STALWART_TOKEN)
