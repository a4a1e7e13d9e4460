from django.contrib import admin

from mailboxes.models import AddressReservation, ApiKey, Message, OutboundMessage, Owner


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["prefix", "created_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at"]


@admin.register(Owner)
class OwnerAdmin(admin.ModelAdmin):
    list_display = ["name", "plan", "created_at"]
    list_filter = ["plan"]
    search_fields = ["name"]
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "owner", "created_at", "revoked_at"]
    list_filter = ["revoked_at", "owner__plan"]
    search_fields = ["prefix", "owner__name"]
    readonly_fields = ["prefix", "key_hash", "created_at"]
    list_select_related = ["owner"]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    """Received mail, read-only. The list reads no bodies (they live in MessageContent),
    so a page of 100 rows stays a page of 100 small rows."""

    list_display = ["id", "mailbox", "from_header", "subject", "size", "received_at", "is_read"]
    search_fields = ["mailbox__address", "subject", "from_header"]
    list_select_related = ["mailbox"]
    fields = ["mailbox", "received_at", "envelope_from", "envelope_to", "from_header", "to_header", "subject", "size",
              "has_attachments", "is_read", "text"]
    readonly_fields = fields
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="text")
    def text(self, message: Message) -> str:
        return message.content.text[:10_000]


@admin.register(OutboundMessage)
class OutboundMessageAdmin(admin.ModelAdmin):
    list_display = ["id", "mailbox", "subject", "status", "attempts", "created_at", "sent_at"]
    list_filter = ["status"]
    search_fields = ["mailbox__address", "subject"]
    list_select_related = ["mailbox"]


@admin.register(AddressReservation)
class AddressReservationAdmin(admin.ModelAdmin):
    list_display = ["address", "reserved_at"]
    search_fields = ["address"]
    show_full_result_count = False
