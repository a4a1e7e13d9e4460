from django.contrib import admin, messages

from expiry.operators import cleanup_requeue
from expiry.models import Cleanup
from mailboxes.ending import mailboxes_force_expire
from mailboxes.models import CleanupState, Mailbox


@admin.action(description="Retry cleanup of dead letters")
def retry_cleanup(modeladmin, request, queryset):
    ids = list(queryset.filter(cleanup_state=CleanupState.DEAD).values_list("id", flat=True))
    requeued = cleanup_requeue(mailbox_ids=ids)
    modeladmin.message_user(request, f"Queued cleanup again for {len(requeued)} mailbox(es).", messages.SUCCESS)


@admin.action(description="Expire now (active mailboxes)")
def expire_now(modeladmin, request, queryset):
    expired = mailboxes_force_expire(mailbox_ids=list(queryset.values_list("id", flat=True)))
    modeladmin.message_user(request, f"Expired {len(expired)} mailbox(es); their cleanup is queued.", messages.SUCCESS)


@admin.register(Mailbox)
class MailboxAdmin(admin.ModelAdmin):
    list_display = ["address", "owner", "status", "created_at", "expires_at", "expired_at", "cleanup_state", "cleanup_attempts"]
    list_filter = ["status", "cleanup_state", "owner__plan"]
    search_fields = ["address", "owner__name", "id"]
    date_hierarchy = "created_at"
    list_select_related = ["owner"]
    readonly_fields = ["id", "token_hash", "backend_id", "cleanup_claim", "cleanup_queued_at", "cleanup_lease_until", "cleanup_attempts",
                       "cleanup_last_error", "cleanup_done_at", "created_at", "expired_at", "deleted_at"]
    show_full_result_count = False
    actions = [expire_now, retry_cleanup]


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
