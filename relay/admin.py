"""The outbox in the admin: every mail Relay sent or owes, dead letters (failed) first,
with a requeue action. Rows are read-only; a status changes only through the mailer,
its workers, and the action here."""
from django.contrib import admin, messages
from django.db.models import Case, IntegerField, Value, When

from mailboxes.admin import ReadOnlyAdmin
from relay.models import OutboxMail, OutboxStatus
from relay.outbox.sending import mails_requeue


@admin.action(description="Requeue failed mails (a fresh set of attempts)")
def requeue(modeladmin, request, queryset):
    count = mails_requeue(mail_ids=list(queryset.values_list("id", flat=True)))
    modeladmin.message_user(request, f"Requeued {count} mail(s); the mailers pick them up now.", messages.SUCCESS)


@admin.register(OutboxMail)
class OutboxAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "to_list", "subject", "status", "attempts", "last_error_short", "created_at",
                    "sent_at"]
    list_filter = ["status", "kind"]
    search_fields = ["subject", "from_email", "mailbox__address"]
    list_select_related = ["mailbox"]
    # Token mails hold a live link until they are sent: not shown here.
    exclude = ["text", "html"]
    show_full_result_count = False
    actions = [requeue]

    def get_queryset(self, request):
        dead_first = Case(When(status=OutboxStatus.FAILED, then=Value(0)), default=Value(1),
                          output_field=IntegerField())
        return super().get_queryset(request).annotate(dead_first=dead_first).order_by("dead_first", "-id")

    def has_change_permission(self, request, obj=None) -> bool:
        # The requeue action needs it on the list; the form stays read-only.
        return obj is None and super(ReadOnlyAdmin, self).has_change_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in OutboxMail._meta.fields if field.name not in self.exclude]

    @admin.display(description="to")
    def to_list(self, mail: OutboxMail) -> str:
        return ", ".join(mail.to)[:80]

    @admin.display(description="last error")
    def last_error_short(self, mail: OutboxMail) -> str:
        return mail.last_error[:120]
