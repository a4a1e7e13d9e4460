"""Creating a mailbox, crash-safe: the start of its lifecycle, which ends in
mailboxes/ending.py.

The row comes first: the address is reserved and the mailbox written as `provisioning`,
leased, before `provision()` is called. Success makes it `active`. A failure makes it
owe a deprovision at once; a creator that dies mid-call leaves a lease that lapses, and
the sweep then does the same (expiry/sweep.py). So no backend account ever exists
without a Relay row that owns it, and an address whose mailbox never came to be stays
reserved, like every address ever handed out.
"""
import logging
import re
from datetime import timedelta

from django.conf import settings

from domains.services import verified_domain
from mailboxes.ending import provisioning_refused, provisionings_abandon
from mailboxes.errors import (AccountNotRelays, AddressTaken, BackendFailure, BackendUnavailable, DomainRefused,
                              InvalidRequest)
from mailboxes.keys import Caller
from mailboxes.models import Mailbox
from mailboxes.services import mailbox_activate, mailbox_insert
from owed.clock import db_now

logger = logging.getLogger(__name__)


def provision_lease_seconds(backend) -> float:
    """How long a creator is trusted: the cleanup lease plus the longest a provision call
    can take, so the lease never lapses while the backend may still be creating."""
    return settings.RELAY_CLEANUP_LEASE_SECONDS + backend.provision_seconds_max


# A local part Relay hands out: a dot-atom of a-z, 0-9, '_' and '-' (no leading, trailing
# or doubled dot), at most 64 characters. The API's schema says the same, in any case.
LOCAL_PART_PATTERN = r"[a-z0-9_-]+(\.[a-z0-9_-]+)*"
_LOCAL_PART = re.compile(LOCAL_PART_PATTERN)


def address_allowed(*, backend, local_part: str | None, domain: str | None,
                    owner=None) -> tuple[str | None, str | None]:
    """The rules on what address may be handed out, for every door: the local part a
    dot-atom (LOCAL_PART_PATTERN) and not reserved (RELAY_RESERVED_LOCAL_PARTS, and the
    backend's own names), the domain one of RELAY_DOMAINS or one of `owner`'s verified
    domains (docs/api.md, "Domains"). Returns both lowercased; InvalidRequest naming the
    field."""
    local_part, domain = (local_part or None) and local_part.lower(), (domain or None) and domain.lower()
    if local_part is not None and (len(local_part) > 64 or not _LOCAL_PART.fullmatch(local_part)):
        raise InvalidRequest("local_part must be 1 to 64 of a-z, 0-9, '.', '_' and '-', with no leading, trailing or "
                             "double dot.", field="local_part")
    if domain is not None and domain not in settings.RELAY_DOMAINS and not verified_domain(owner=owner, name=domain):
        raise DomainRefused()
    if local_part is not None and (local_part in settings.RELAY_RESERVED_LOCAL_PARTS
                                   or local_part in backend.reserved_names()):
        raise InvalidRequest(f"{local_part} is a reserved address and cannot be handed out.", field="local_part")
    return local_part, domain


def mailbox_create(*, backend, caller: Caller | None, local_part: str | None, domain: str | None,
                   ttl_ms: int | None, labels: dict | None = None) -> tuple[Mailbox, str | None]:
    """Create a mailbox, provisioned on `backend` (relay.backends.get_backend(): the
    caller hands it in, as the backends sit above this app). Returns it and, for an
    anonymous caller, its token (shown once). Raises AddressTaken (also when the mail
    server already has an account of that name, which Relay never takes over),
    InvalidRequest, or BackendUnavailable (the address then stays reserved, and nothing
    else is kept)."""
    local_part, domain = address_allowed(backend=backend, local_part=local_part, domain=domain,
                                         owner=caller.owner if caller else None)
    if not backend.keeps_accounts:
        # Nothing outside Relay to create, so nothing a crash could orphan: the row is
        # the whole mailbox, written active in one transaction.
        return mailbox_insert(caller=caller, local_part=local_part, domain=domain, ttl_ms=ttl_ms,
                              lease_seconds=0, active=True, labels=labels)
    mailbox, token = mailbox_insert(caller=caller, local_part=local_part, domain=domain, ttl_ms=ttl_ms,
                                    lease_seconds=provision_lease_seconds(backend), labels=labels,
                                    per_local_part=backend.one_account_per_local_part)
    # No transaction is open here: the intent is committed before the network call.
    started = db_now()
    # However the call ends, the backend may go on creating for as long as a provision
    # call may last; the undo waits that long.
    settled_by = started + timedelta(seconds=backend.provision_seconds_max)
    try:
        backend_id = backend.provision(mailbox)
    except AccountNotRelays as exc:
        # Someone else's account: nothing of Relay's to undo, and nothing to remove.
        provisioning_refused(mailbox_id=mailbox.id, reason=str(exc))
        raise AddressTaken(f"The address {mailbox.address} is taken on the mail server.") from exc
    except BackendFailure as exc:
        provisionings_abandon(mailbox_ids=[mailbox.id], reason=str(exc), not_before=settled_by)
        raise BackendUnavailable() from exc
    except Exception as exc:
        # A bug: whatever the backend did meanwhile, the row still owes an undo.
        provisionings_abandon(mailbox_ids=[mailbox.id], reason=f"{type(exc).__name__}: {exc}", not_before=settled_by)
        raise
    if not mailbox_activate(mailbox=mailbox, backend_id=backend_id):
        raise BackendUnavailable("Provisioning the mailbox took too long; try again.")
    return mailbox, token
