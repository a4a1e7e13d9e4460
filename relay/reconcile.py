"""Reconciliation: accounts on the mail backend that no live mailbox owns or still owes a
cleanup; listed first, destroyed after."""
import logging
import time
from dataclasses import dataclass, field

from django.db.models import Q

from mailboxes.models import CLEANUPS, LIVE, AddressReservation, CleanupState, Mailbox
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
    # Live, or ended with its cleanup still owed or given up: its account is Relay's still.
    owning = LIVE | CLEANUPS.still_owed() | Q(cleanup_state=CleanupState.DEAD)
    return set(Mailbox.objects.filter(owning, address__in=addresses).values_list("address", flat=True))


def orphans_find(*, domains: list[str]) -> list[Orphan]:
    """The backend's accounts in `domains` that no live mailbox owns. Raises
    NothingToReconcile for a backend without accounts of its own."""
    backend = get_backend()
    if backend.one_account_per_local_part:
        return _orphaned_names(backend, domains)
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


def _orphaned_names(backend, domains: list[str]) -> list[Orphan]:
    """For Cyrus (accounts named by local part): an account is Relay's if it handed the name
    out, and an orphan if no live mailbox of that local part owns it."""
    names = [name for name, _ in backend.accounts(domains[0])]
    orphans: list[Orphan] = []
    for start in range(0, len(names), LOOKUP_BATCH):
        batch = names[start:start + LOOKUP_BATCH]
        relays = {address[:-1] for address in AddressReservation.objects.filter(
            address__in=[f"{name}@" for name in batch]).values_list("address", flat=True)}
        owned = {address.rsplit("@", 1)[0] for address in _owned([f"{n}@{d}" for n in relays for d in domains])}
        orphans += [Orphan(name, f"{name}@{domains[0]}") for name in batch if name in relays and name not in owned]
    return orphans


def _unowned(accounts: list[tuple[str, str]]) -> list[Orphan]:
    owned = _owned([address for _, address in accounts])
    return [Orphan(backend_id, address) for backend_id, address in accounts if address not in owned]


def _destroy_with_retries(orphan: Orphan) -> None:
    """Deprovision with the cleanups' retry rules (mailboxes.models.CLEANUPS): their
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
