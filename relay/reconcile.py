"""Reconciliation: accounts on the mail backend that no live Relay mailbox owns.

Crash-safe creation (mailboxes/creation.py) means Relay itself leaves none behind; this
finds what came before it, or what someone made on the backend by hand. An account is
owned while a mailbox row with its address is provisioning or active, or still owes its
cleanup (pending, running, or dead and waiting for an operator): those the cleanup
machinery sees to. Listing comes first and destroying after, since destroying while
paging would shift the pages."""
import logging
import time
from dataclasses import dataclass, field

from django.db.models import Q

from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from mailboxes.ending import CLEANUPS
from relay.backends import TransientBackendError, get_backend

logger = logging.getLogger(__name__)

# Addresses are checked against the database this many at a time.
LOOKUP_BATCH = 1000


@dataclass
class Orphan:
    backend_id: str
    address: str


@dataclass
class ReconcileResult:
    orphans: list[Orphan] = field(default_factory=list)
    destroyed: list[Orphan] = field(default_factory=list)
    failed: list[tuple[Orphan, str]] = field(default_factory=list)


def _owned(addresses: list[str]) -> set[str]:
    live = Q(status__in=(MailboxStatus.PROVISIONING, MailboxStatus.ACTIVE)) | Q(
        cleanup_state__in=(CleanupState.PENDING, CleanupState.RUNNING, CleanupState.DEAD))
    return set(Mailbox.objects.filter(live, address__in=addresses).values_list("address", flat=True))


def orphans_find(*, domains: list[str]) -> list[Orphan]:
    """The backend's accounts in `domains` that no live mailbox owns. Raises
    NothingToReconcile for a backend without accounts of its own."""
    backend = get_backend()
    orphans: list[Orphan] = []
    for domain in domains:
        page: list[tuple[str, str]] = []
        for account in backend.accounts(domain):
            page.append(account)
            if len(page) == LOOKUP_BATCH:
                orphans += _unowned(page)
                page = []
        orphans += _unowned(page)
    return orphans


def _unowned(accounts: list[tuple[str, str]]) -> list[Orphan]:
    owned = _owned([address for _, address in accounts])
    return [Orphan(backend_id, address) for backend_id, address in accounts if address not in owned]


def _destroy_with_retries(orphan: Orphan) -> None:
    """Deprovision with the cleanups' retry rules (mailboxes.ending.CLEANUPS): their
    number of attempts, their backoff with full jitter; a permanent error is final at once."""
    backend = get_backend()
    for attempt in range(1, CLEANUPS.max_attempts() + 1):
        try:
            backend.deprovision(orphan)
            return
        except TransientBackendError:
            if not CLEANUPS.has_retry_left(attempt):
                raise
            time.sleep(CLEANUPS.retry_delay(attempt - 1))


def reconcile(*, domains: list[str], destroy: bool) -> ReconcileResult:
    result = ReconcileResult(orphans=orphans_find(domains=domains))
    logger.info("reconcile found %d backend account(s) in %s that no live mailbox owns",
                len(result.orphans), ", ".join(domains))
    if not destroy:
        return result
    for orphan in result.orphans:
        try:
            _destroy_with_retries(orphan)
        except Exception as exc:
            result.failed.append((orphan, f"{type(exc).__name__}: {exc}"))
            logger.error("reconcile could not destroy %s (%s): %s", orphan.address, orphan.backend_id, exc)
        else:
            result.destroyed.append(orphan)
            logger.info("reconcile destroyed %s (%s)", orphan.address, orphan.backend_id)
    return result
