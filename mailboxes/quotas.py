"""The live-mailbox quota of the plans (accounts.models.plan_limit): a slot taken under the
owner's row lock, QuotaExceeded with the seconds until one could be, slots given back."""
from collections import Counter

from django.db.models import F
from django.db.models.functions import Greatest

from accounts.models import Account, plan_limit
from mailboxes.errors import QuotaExceeded
from mailboxes.models import Mailbox
from owed import db_now


def take_mailbox_slot(owner: Account) -> None:
    """Count one more live mailbox for `owner` or raise QuotaExceeded, inside the creating
    transaction: the conditional UPDATE is the check."""
    limit = plan_limit(owner.plan, "active_mailboxes")
    if Account.objects.filter(id=owner.id, live_mailboxes__lt=limit).update(live_mailboxes=F("live_mailboxes") + 1):
        return
    live = Mailbox.objects.live().filter(owner=owner)
    soonest = live.order_by("expires_at").values_list("expires_at", flat=True).first()
    wait = (soonest - db_now()).total_seconds() if soonest else 60
    raise QuotaExceeded(f"The {owner.plan} plan allows {limit} active mailboxes; delete one or wait for one "
                        "to expire.", retry_after=wait)


def give_back_mailbox_slots(mailbox_ids: list) -> None:
    """The mailboxes `mailbox_ids` just stopped being live (expired, deleted, or never
    provisioned): give their owners' slots back. Call in the transaction that ended them."""
    owners = Counter(Mailbox.objects.filter(id__in=mailbox_ids, owner__isnull=False)
                     .values_list("owner_id", flat=True))
    for owner_id, ended in owners.items():
        Account.objects.filter(id=owner_id).update(live_mailboxes=Greatest(F("live_mailboxes") - ended, 0))
