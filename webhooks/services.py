"""Webhooks of an account: create (checking the URL), list, delete."""
import logging

from django.conf import settings
from django.db import transaction

from accounts.errors import InvalidRequest, NotFound
from accounts.models import Account
from mailboxes.errors import QuotaExceeded
from mailboxes.models import Mailbox
from webhooks import signing
from webhooks.models import Webhook
from core.http import PrivateAddress, check_url

logger = logging.getLogger(__name__)


def webhook_create(*, owner, url: str, events: list[str], mailbox_id=None) -> Webhook:
    """A new webhook of `owner`. At most RELAY_MAX_WEBHOOKS per account (QuotaExceeded):
    every inbound mail makes one delivery per webhook, so without a cap an account could
    aim Relay at a third party many times over."""
    try:
        check_url(url)
    except PrivateAddress as exc:
        raise InvalidRequest(str(exc), field="url") from None
    mailbox = None
    if mailbox_id is not None:
        mailbox = Mailbox.objects.visible().filter(id=mailbox_id, owner=owner).first()
        if mailbox is None:
            # Like every route: another owner's mailbox is not found, exactly as a missing one.
            raise NotFound("No such mailbox.")
    with transaction.atomic():
        # The account's row lock orders concurrent creations: each counts the others'.
        list(Account.objects.select_for_update().filter(id=owner.id).values_list("id", flat=True))
        if Webhook.objects.filter(owner=owner).count() >= settings.RELAY_MAX_WEBHOOKS:
            raise QuotaExceeded(f"An account may have at most {settings.RELAY_MAX_WEBHOOKS} webhooks; "
                                "delete one first.", retry_after=60)
        webhook = Webhook.objects.create(owner=owner, url=url, events=sorted(set(events)), mailbox=mailbox,
                                         secret=signing.new_secret())
    logger.info("account %s added webhook %s for %s", owner.login, webhook.id, ", ".join(webhook.events))
    return webhook


def webhook_get(*, owner, webhook_id: int) -> Webhook:
    webhook = Webhook.objects.filter(id=webhook_id, owner=owner).first()
    if webhook is None:
        raise NotFound()
    return webhook


def webhook_delete(*, owner, webhook_id: int) -> None:
    webhook_get(owner=owner, webhook_id=webhook_id).delete()
