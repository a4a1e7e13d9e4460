from django.contrib import admin

from mailboxes.models import AddressReservation, Message


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewing only: no add, no edit, no delete. Rows whose state the services keep
    (counters, cleanups, reservations) change only through those services."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Received mail. The list reads no bodies (they live in MessageContent), so a page
    of 100 rows stays a page of 100 small rows."""

    list_display = ["id", "mailbox", "from_header", "subject", "size", "received_at", "is_read"]
    search_fields = ["mailbox__address", "subject", "from_header"]
    list_select_related = ["mailbox"]
    fields = ["mailbox", "received_at", "envelope_from", "envelope_to", "from_header", "to_header", "subject", "size",
              "has_attachments", "is_read", "text"]
    readonly_fields = fields
    show_full_result_count = False

    @admin.display(description="text")
    def text(self, message: Message) -> str:
        return message.content.text[:10_000]


@admin.register(AddressReservation)
class AddressReservationAdmin(ReadOnlyAdmin):
    """Every address ever handed out; never deleted, so none is handed out twice."""

    list_display = ["address", "reserved_at"]
    search_fields = ["address"]
    show_full_result_count = False
