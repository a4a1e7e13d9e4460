from django.contrib import admin, messages

from expiry import services
from expiry.models import Cleanup
from mailboxes.models import CleanupState


@admin.action(description="Retry cleanup of dead letters")
def retry_cleanup(modeladmin, request, queryset):
    ids = list(queryset.filter(cleanup_state=CleanupState.DEAD).values_list("id", flat=True))
    requeued = services.cleanup_requeue(mailbox_ids=ids)
    modeladmin.message_user(request, f"Queued cleanup again for {len(requeued)} mailbox(es).", messages.SUCCESS)


@admin.action(description="Expire now (active mailboxes)")
def expire_now(modeladmin, request, queryset):
    expired = services.mailboxes_expire_now(mailbox_ids=list(queryset.values_list("id", flat=True)))
    modeladmin.message_user(request, f"Expired {len(expired)} mailbox(es); their cleanup is queued.", messages.SUCCESS)


@admin.register(Cleanup)
class CleanupAdmin(admin.ModelAdmin):
    """Dead letters first: filter by cleanup state to see what is owed or given up."""

    list_display = ["address", "status", "cleanup_state", "cleanup_attempts", "short_error", "expires_at",
                    "expired_at", "deleted_at", "cleanup_lease_until", "cleanup_done_at"]
    list_filter = ["cleanup_state", "status"]
    search_fields = ["address", "cleanup_last_error"]
    ordering = ["-expired_at"]
    actions = [retry_cleanup]
    show_full_result_count = False
    readonly_fields = [field.name for field in Cleanup._meta.fields]

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(cleanup_state=CleanupState.NONE).select_related("owner")

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="last error")
    def short_error(self, cleanup: Cleanup) -> str:
        return cleanup.cleanup_last_error[:120]
