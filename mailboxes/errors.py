"""The domain's errors. Plain exceptions with no HTTP in sight: a management command, a
Celery task and the SMTP server get the same error from the same service. `api/` maps
each one to a status and a code (api/errors.py)."""


class RelayError(Exception):
    """An error a caller can cause and be told about. `message` is for the caller."""

    default_message = "The request could not be carried out."

    def __init__(self, message: str | None = None):
        self.message = message or self.default_message
        super().__init__(self.message)


class NotFound(RelayError):
    default_message = "Not found."


class MailboxExpired(RelayError):
    default_message = "Mailbox has expired"


class AddressTaken(RelayError):
    default_message = "That address has already been used."


class InvalidRequest(RelayError):
    """Input that passed the format checks but breaks a rule of the domain."""

    def __init__(self, message: str | None = None, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class BackendUnavailable(RelayError):
    default_message = "The mail backend could not provision the mailbox; try again later."


class QuotaExceeded(RelayError):
    """Over one of the plan's quotas. `retry_after`: seconds until it may succeed."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class Forbidden(RelayError):
    default_message = "You may not do that."
