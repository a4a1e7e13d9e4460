"""Mailboxes on domains of one's own (domains/): a domain may not be removed while
mailboxes live on it."""
import logging

from django.db import transaction

from accounts.errors import Conflict
from accounts.models import Account
from domains.models import Domain
from domains.services import domain_get
from mailboxes.models import Mailbox

logger = logging.getLogger(__name__)


def domain_delete(*, owner: Account, domain_id) -> None:
    """Remove one of `owner`'s domains (NotFound for anyone else's). Conflict while an
    active (or provisioning) mailbox uses it. The domain's row lock orders this against
    a mailbox being created on it (mailboxes.lifecycle.mailbox_insert), which either
    finishes first and is seen here, or finds the domain gone."""
    domain = domain_get(owner=owner, domain_id=domain_id)
    with transaction.atomic():
        if not Domain.objects.select_for_update().filter(id=domain.id).exists():
            return
        live = Mailbox.objects.live().filter(owner=owner, address__endswith=f"@{domain.name}").count()
        if live:
            raise Conflict(f"{live} active mailbox(es) use {domain.name}; delete them or let them expire first.")
        Domain.objects.filter(id=domain.id).delete()
    logger.info("account %s removed domain %s", owner.login, domain.name)
