"""Creating a mailbox, crash-safe: the row reserved and written `provisioning` before the
backend is asked, so no backend account exists without a row that owns it."""
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
from mailboxes.changes import mailbox_activate, mailbox_insert
from owed import db_now

logger = logging.getLogger(__name__)


def provision_lease_seconds(backend) -> float:
    """How long a creator is trusted: the cleanup lease plus the longest a provision call
    can take, so the lease never lapses while the backend may still be creating."""
    return settings.RELAY_CLEANUP_LEASE_SECONDS + backend.provision_seconds_max


# A local part Relay hands out: a dot-atom of a-z, 0-9, '_' and '-' (no leading, trailing
# or doubled dot), at most 64 characters. The API's schema says the same, in any case.
LOCAL_PART_PATTERN = r"[a-z0-9_-]+(\.[a-z0-9_-]+)*"
_LOCAL_PART = re.compile(LOCAL_PART_PATTERN)


def local_part_checked(value: str) -> str:
    """A local part as every door takes it, lowercased: a dot-atom of 1 to 64 characters."""
    value = value.lower()
    if len(value) > 64 or not _LOCAL_PART.fullmatch(value):
        raise InvalidRequest("local_part must be 1 to 64 of a-z, 0-9, '.', '_' and '-', with no leading, trailing or "
                             "double dot.", field="local_part")
    return value


def address_allowed(*, backend, local_part: str | None, domain: str | None,
                    owner=None) -> tuple[str | None, str | None]:
    """The address rules for every door: a dot-atom local part not reserved, a domain of
    RELAY_DOMAINS or the owner's verified ones. Both lowercased; InvalidRequest naming the field."""
    local_part = None if local_part is None else local_part_checked(local_part)
    domain = None if domain is None else domain.lower()
    if domain is not None and domain not in settings.RELAY_DOMAINS and not verified_domain(owner=owner, name=domain):
        raise DomainRefused()
    if local_part is not None and (local_part in settings.RELAY_RESERVED_LOCAL_PARTS
                                   or local_part in backend.reserved_names()):
        raise InvalidRequest(f"{local_part} is a reserved address and cannot be handed out.", field="local_part")
    return local_part, domain


def mailbox_create(*, backend, caller: Caller | None, local_part: str | None, domain: str | None,
                   ttl_ms: int | None, labels: dict | None = None) -> tuple[Mailbox, str | None]:
    """Create a mailbox provisioned on `backend` (handed in: backends sit above). Returns it
    and an anonymous caller's token; AddressTaken, InvalidRequest or BackendUnavailable."""
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
