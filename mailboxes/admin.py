from django.contrib import admin, messages
from django.db.models import Case, IntegerField, Value, When
from django.urls import reverse
from django.utils.html import format_html, format_html_join

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


class ActionsOnlyAdmin(ReadOnlyAdmin):
    """Read-only rows with actions on the list. Django shows actions only to whoever may
    change rows; the form stays read-only (every field is), so nothing can be saved."""

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super(ReadOnlyAdmin, self).has_change_permission(request, obj)


class DeadLettersFirstAdmin(ActionsOnlyAdmin):
    """A list of owed work (owed/): its dead letters first, then the newest."""

    owed_work = None  # the OwedWork whose rows this lists
    newest_first = "-pk"

    def get_ordering(self, request):
        kind = self.owed_work
        dead_first = Case(When(**{kind.state: kind.dead}, then=Value(0)), default=Value(1),
                          output_field=IntegerField())
        return [dead_first.asc(), self.newest_first]


def action_calling(service, *, name: str, description: str, done: str):
    """An admin action that hands the selected rows' primary keys to `service`, which
    returns how many it acted on, and says so: `done` with {count} filled in."""
    def action(modeladmin, request, queryset):
        count = service(list(queryset.values_list("pk", flat=True)))
        modeladmin.message_user(request, done.format(count=count), messages.SUCCESS)

    action.__name__ = name
    return admin.action(description=description)(action)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Received mail. The list reads no bodies (they live in MessageContent), so a page
    of 100 rows stays a page of 100 small rows."""

    list_display = ["id", "mailbox", "from_header", "subject", "size", "received_at", "is_read"]
    search_fields = ["mailbox__address", "subject", "from_header"]
    list_select_related = ["mailbox"]
    fields = ["mailbox", "received_at", "envelope_from", "envelope_to", "from_header", "to_header", "subject", "size",
              "has_attachments", "is_read", "codes", "links", "html", "text"]
    readonly_fields = fields
    show_full_result_count = False

    @admin.display(description="text")
    def text(self, message: Message) -> str:
        return message.content.text[:10_000]

    @admin.display(description="codes")
    def codes(self, message: Message) -> str:
        return ", ".join(message.content.codes) or "-"

    @admin.display(description="links")
    def links(self, message: Message) -> str:
        links = ((link["url"], link.get("text") or link["url"]) for link in message.content.links)
        return format_html_join("", '<div><a href="{}" target="_blank" rel="noopener noreferrer">{}</a></div>',
                                links) or "-"

    @admin.display(description="HTML")
    def html(self, message: Message) -> str:
        """The web inbox's sandboxed view of the mail's HTML (no script, nothing remote)."""
        if not message.content.html:
            return "-"
        return format_html('<iframe sandbox="allow-popups" referrerpolicy="no-referrer" src="{}" title="The message as '
                           'HTML" style="width:100%;min-width:40rem;height:30rem;border:1px solid #ccc"></iframe>',
                           reverse("inbox-staff-html", args=[message.id]))


@admin.register(AddressReservation)
class AddressReservationAdmin(ReadOnlyAdmin):
    """Every address ever handed out; never deleted, so none is handed out twice."""

    list_display = ["address", "reserved_at"]
    search_fields = ["address"]
    show_full_result_count = False
