"""The local backend: Relay's own SMTP server is the mail store, so there is nothing
external to create or remove. The mailbox row alone decides what is accepted."""
from django.conf import settings

from relay.backends import NothingToReconcile, PermanentBackendError, counted_backend_call


class LocalBackend:
    name = "local"
    keeps_accounts = False
    one_account_per_local_part = False
    provision_seconds_max = 0

    def reserved_names(self) -> set[str]:
        return set()

    @counted_backend_call("provision")
    def provision(self, mailbox) -> str:
        return ""

    @counted_backend_call("deprovision")
    def deprovision(self, mailbox) -> None:
        prefix = settings.RELAY_LOCAL_FAIL_CLEANUP_PREFIX
        if prefix and mailbox.address.startswith(prefix):
            raise PermanentBackendError(f"RELAY_LOCAL_FAIL_CLEANUP_PREFIX={prefix} makes this cleanup fail (a demo)")

    def accounts(self, domain: str):
        raise NothingToReconcile("the local backend keeps no accounts of its own: its mailboxes are Relay's rows")
