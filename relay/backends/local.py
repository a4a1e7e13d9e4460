"""The local backend: Relay's own SMTP server is the mail store, so there is nothing
external to create or remove. The mailbox row alone decides what is accepted."""
from relay.backends import NothingToReconcile


class LocalBackend:
    name = "local"
    provision_seconds_max = 0

    def provision(self, mailbox) -> str:
        return ""

    def deprovision(self, mailbox) -> None:
        return None

    def accounts(self, domain: str):
        raise NothingToReconcile("the local backend keeps no accounts of its own: its mailboxes are Relay's rows")
