"""The mailbox errors, on top of the domain's common ones (accounts/errors.py, re-exported
here so that callers above need one import)."""
from django.conf import settings

from accounts.errors import (  # noqa: F401 (re-exported)
    AccountSuspended,
    Conflict,
    Forbidden,
    Gone,
    InvalidRequest,
    NotConfigured,
    NotFound,
    QuotaExceeded,
    RelayError,
)


class MailboxExpired(Gone):
    default_message = "Mailbox has expired"


class TtlOutOfRange(InvalidRequest):
    """A lifetime outside what the plan allows. Each door words it in its own unit (the
    API in ms, the MCP tools in minutes) from the bounds it carries."""

    def __init__(self, *, low_ms: int, cap_ms: int, plan: str):
        self.low_ms, self.cap_ms, self.plan = low_ms, cap_ms, plan
        super().__init__(f"ttl_ms must be between {low_ms} and {cap_ms} on the {plan} plan.", field="ttl_ms")


class DomainRefused(InvalidRequest):
    """A mailbox's domain that is neither one of RELAY_DOMAINS nor a verified domain of
    its owner's."""

    def __init__(self):
        super().__init__(f"domain must be one of {', '.join(settings.RELAY_DOMAINS)} or a verified domain of your "
                         "account.", field="domain")


class AddressTaken(Conflict):
    default_message = "That address has already been used."


class MessageTooLarge(RelayError):
    """A mail to send that would be over RELAY_MAX_MESSAGE_BYTES once built."""

    def __init__(self):
        super().__init__(f"The message would be over {settings.RELAY_MAX_MESSAGE_BYTES} bytes "
                         "(RELAY_MAX_MESSAGE_BYTES, attachments included); send less at once.")


class BackendFailure(Exception):
    """A call to the mail backend failed."""


class AccountNotRelays(BackendFailure):
    """The mail server holds an account of that name Relay did not make: refused (409)."""


class BackendUnavailable(RelayError):
    default_message = "The mail backend could not provision the mailbox; try again later."


class RateLimited(RelayError):
    """Too much at once from one caller (open waits and streams). `retry_after`: seconds."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class Suppressed(RelayError):
    """A send to an address on the account's suppression list (docs/delivery.md): the
    whole send is refused, and nothing is queued."""

    def __init__(self, *, address: str, reason: str):
        self.address, self.reason = address, reason
        why = "bounced for good" if reason == "bounced" else "reported mail from this account as spam"
        super().__init__(f"{address} is on this account's suppression list: it {why}. Nothing was sent; remove it "
                         f"(DELETE /api/v1/suppressions/{address}) to send to it again.")
