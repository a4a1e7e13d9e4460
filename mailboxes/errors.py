"""The mailbox errors, on top of the domain's common ones (accounts/errors.py, re-exported
here so that callers above need one import)."""
from accounts.errors import (  # noqa: F401 (re-exported)
    AccountSuspended,
    Conflict,
    Forbidden,
    Gone,
    InvalidRequest,
    NotFound,
    RelayError,
)


class MailboxExpired(Gone):
    default_message = "Mailbox has expired"


class AddressTaken(Conflict):
    default_message = "That address has already been used."


class BackendFailure(Exception):
    """A call to the mail backend failed. The kinds (transient, permanent) are the
    backends' own (relay/backends/errors.py); creating a mailbox only needs to know that
    the call failed."""


class BackendUnavailable(RelayError):
    default_message = "The mail backend could not provision the mailbox; try again later."


class QuotaExceeded(RelayError):
    """Over one of the plan's quotas. `retry_after`: seconds until it may succeed."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class RateLimited(RelayError):
    """Too much at once from one caller (open waits and streams). `retry_after`: seconds."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))
