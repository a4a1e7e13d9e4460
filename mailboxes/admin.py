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
    """A list of owed work (owed/): its dead letters first, then the newest. Titled in an
    operator's words: Django's own ("Select … to change") is wrong twice over here, since
    nothing in it can be changed by hand."""

    owed_work = None  # the OwedWork whose rows this lists
    newest_first = "-pk"
    list_title = ""  # the list's heading
    dead_title = "Dead letter"  # a dead row's heading, then its name (`case_name`)
    owed_title = ""  # the heading of a row still owed or settled

    def get_ordering(self, request):
        kind = self.owed_work
        dead_first = Case(When(**{kind.state: kind.dead}, then=Value(0)), default=Value(1),
                          output_field=IntegerField())
        return [dead_first.asc(), self.newest_first]

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {"title": self.list_title, **(extra_context or {})})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        row = self.get_object(request, object_id)
        if row is not None:
            dead = getattr(row, self.owed_work.state) == self.owed_work.dead
            extra_context = {"title": f"{self.dead_title if dead else self.owed_title}: {self.case_name(row)}",
                             "subtitle": None, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context)

    def case_name(self, row) -> str:
        return str(row)


def mailbox_links(mailbox_id, address: str) -> str:
    """A dead letter's way to its mailbox: the mailbox's page and its messages."""
    if mailbox_id is None:
        return "-"
    return format_html('<a href="{}">{}</a> (<a href="{}?mailbox__id__exact={}">messages</a>)',
                       reverse("admin:mailboxes_mailbox_change", args=[mailbox_id]), address,
                       reverse("admin:mailboxes_message_changelist"), mailbox_id)


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
