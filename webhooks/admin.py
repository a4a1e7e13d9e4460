"""Webhooks and their deliveries in the admin: failed deliveries first, with a
redeliver action. Rows are read-only; a delivery's state changes only through its
worker and the action here."""
from django.contrib import admin

from mailboxes.admin import DeadLettersFirstAdmin, ReadOnlyAdmin, action_calling
from webhooks.delivery import DELIVERIES, deliveries_redeliver
from webhooks.models import Webhook, WebhookDelivery


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    list_display = ["id", "owner", "url", "events", "mailbox", "created_at", "disabled_at"]
    list_filter = ["disabled_at"]
    search_fields = ["url", "owner__login"]
    exclude = ["secret"]


def _redeliver(delivery_ids: list[int]) -> int:
    from webhooks.tasks import deliver_webhook, publish_quietly

    ids = deliveries_redeliver(delivery_ids=delivery_ids)
    publish_quietly(deliver_webhook, ids)
    return len(ids)


redeliver = action_calling(_redeliver, name="redeliver",
                           description="Redeliver failed deliveries (a fresh set of attempts)",
                           done="Queued {count} delivery(ies) again.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(DeadLettersFirstAdmin):
    list_title = "Webhook deliveries: failed ones first, then the newest"
    dead_title = "Failed delivery"
    owed_title = "Webhook delivery"
    list_display = ["id", "webhook", "event", "status", "attempts", "last_status_code", "last_error", "created_at"]
    list_filter = ["status", "event"]
    search_fields = ["message_id", "webhook__url"]
    list_select_related = ["webhook"]
    actions = [redeliver]
    show_full_result_count = False
    owed_work = DELIVERIES

    def case_name(self, delivery: WebhookDelivery) -> str:
        return f"{delivery.event} to {delivery.webhook.url}"
