"""The domain's errors. Plain exceptions with no HTTP in sight: a management command, a
Celery task and the SMTP server get the same error from the same service. `api/` maps
each kind to a status and a code (api/errors.py).

They live here, in the lowest app, so that every app above can raise them; the
mailbox-specific ones are in mailboxes/errors.py."""


class RelayError(Exception):
    """An error a caller can cause and be told about. `message` is for the caller."""

    default_message = "The request could not be carried out."

    def __init__(self, message: str | None = None):
        self.message = message or self.default_message
        super().__init__(self.message)


class NotFound(RelayError):
    default_message = "Not found."


class NotConfigured(NotFound):
    """A feature this Relay was not set up for (a setting unset): 404 not_configured."""

    default_message = "This Relay is not configured for that."


class InvalidRequest(RelayError):
    """Input that passed the format checks but breaks a rule of the domain."""

    def __init__(self, message: str | None = None, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class Forbidden(RelayError):
    default_message = "You may not do that."


class AccountSuspended(Forbidden):
    default_message = "This account is suspended."


class Conflict(RelayError):
    default_message = "That is already taken."


class QuotaExceeded(RelayError):
    """Over one of the plan's or the account's quotas. `retry_after`: seconds until it may
    succeed."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class Gone(RelayError):
    """Something that existed and cannot be used any more: an expired mailbox, a used
    or expired token."""

    default_message = "That is no longer available."
