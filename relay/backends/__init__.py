"""Mail backends: `provision(mailbox)` and `deprovision(mailbox)`, raising
TransientBackendError for what a retry may fix and PermanentBackendError otherwise."""
from functools import lru_cache
from collections.abc import Iterator
from typing import Protocol

from django.conf import settings

from relay.backends.errors import (  # noqa: F401 (the backends' errors, re-exported for their callers)
    AccountExists,
    BackendError,
    NoBackendSlot,
    NotMadeByRelay,
    NothingToReconcile,
    PermanentBackendError,
    TransientBackendError,
)


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


@lru_cache(maxsize=8)
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
