"""Webhooks and their deliveries in the admin: failed deliveries first, with a
redeliver action. Rows are read-only; a delivery's state changes only through its
worker and the action here."""
from django.contrib import admin, messages
from django.db.models import Case, IntegerField, Value, When

from mailboxes.admin import ReadOnlyAdmin
from webhooks.delivery import deliveries_redeliver
from webhooks.models import DeliveryStatus, Webhook, WebhookDelivery


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    list_display = ["id", "owner", "url", "events", "mailbox", "created_at", "disabled_at"]
    list_filter = ["disabled_at"]
    search_fields = ["url", "owner__login"]
    exclude = ["secret"]


@admin.action(description="Redeliver failed deliveries (a fresh set of attempts)")
def redeliver(modeladmin, request, queryset):
    from webhooks.tasks import deliver_webhook, publish_quietly

    ids = deliveries_redeliver(delivery_ids=list(queryset.values_list("id", flat=True)))
    publish_quietly(deliver_webhook, ids)
    modeladmin.message_user(request, f"Queued {len(ids)} delivery(ies) again.", messages.SUCCESS)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "webhook", "event", "status", "attempts", "last_status_code", "last_error", "created_at"]
    list_filter = ["status", "event"]
    search_fields = ["message_id", "webhook__url"]
    list_select_related = ["webhook"]
    actions = [redeliver]
    show_full_result_count = False

    def get_queryset(self, request):
        dead_first = Case(When(status=DeliveryStatus.FAILED, then=Value(0)), default=Value(1),
                          output_field=IntegerField())
        return super().get_queryset(request).annotate(dead_first=dead_first).order_by("dead_first", "-id")

    def has_change_permission(self, request, obj=None) -> bool:
        # The action needs it on the list; every field stays read-only.
        return obj is None and super(ReadOnlyAdmin, self).has_change_permission(request, obj)
