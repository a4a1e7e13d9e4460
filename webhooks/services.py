"""Webhooks of an account: create (checking the URL), list, delete."""
import logging

from accounts.errors import InvalidRequest, NotFound
from mailboxes.models import Mailbox
from webhooks import signing
from webhooks.delivery import PrivateAddress, check_url
from webhooks.models import Webhook

logger = logging.getLogger(__name__)


def webhook_create(*, owner, url: str, events: list[str], mailbox_id=None) -> Webhook:
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
