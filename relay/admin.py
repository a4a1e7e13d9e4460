"""The outbox in the admin: every mail Relay sent or owes, dead letters (failed) first,
with a requeue action. Rows are read-only; a status changes only through the mailer,
its workers, and the action here."""
from django.contrib import admin

from mailboxes.admin import DeadLettersFirstAdmin, action_calling
from relay.models import OutboxMail
from relay.outbox.operators import mails_requeue
from relay.outbox.send import OUTBOX

requeue = action_calling(lambda ids: mails_requeue(mail_ids=ids), name="requeue",
                         description="Requeue failed mails (a fresh set of attempts)",
                         done="Requeued {count} mail(s); the mailers pick them up now.")


@admin.register(OutboxMail)
class OutboxAdmin(DeadLettersFirstAdmin):
    list_title = "Outbox: failed mails first, then the newest"
    dead_title = "Failed mail"
    owed_title = "Mail"
    list_display = ["id", "kind", "to_list", "subject", "status", "attempts", "last_error_short", "created_at",
                    "sent_at"]
    list_filter = ["status", "kind"]
    search_fields = ["subject", "from_email", "mailbox__address"]
    list_select_related = ["mailbox"]
    # Token mails hold a live link until they are sent: not shown here.
    exclude = ["text", "html"]
    show_full_result_count = False
    actions = [requeue]
    owed_work = OUTBOX

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in OutboxMail._meta.fields if field.name not in self.exclude]

    def case_name(self, mail: OutboxMail) -> str:
        return f"{mail.subject or mail.kind} to {', '.join(mail.to)[:80]}"

    @admin.display(description="to")
    def to_list(self, mail: OutboxMail) -> str:
        return ", ".join(mail.to)[:80]

    @admin.display(description="last error")
    def last_error_short(self, mail: OutboxMail) -> str:
        return mail.last_error[:120]
