"""What a backend call can fail with (transient or permanent), below the backends and the
limiter so each imports them alone."""
import functools

from mailboxes.errors import AccountNotRelays, BackendFailure
from relay.metrics import BACKEND_CALLS


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
