"""The operator's admin for mailboxes and their cleanups: read-only rows, changed only by
actions calling the same services as the API and the workers."""
from django.contrib import admin, messages
from django.db.models import F
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse

from expiry.models import Cleanup
from expiry.operators import cleanup_requeue
from mailboxes.admin import ActionsOnlyAdmin, DeadLettersFirstAdmin, ReadOnlyAdmin, action_calling, mailbox_links
from mailboxes.lifecycle import mailboxes_force_expire
from mailboxes.models import CLEANUPS
from mailboxes.models import CleanupState, Mailbox, MailboxStatus


retry_cleanup = action_calling(lambda ids: len(cleanup_requeue(mailbox_ids=ids)), name="retry_cleanup",
                               description="Retry cleanup of the selected dead letters",
                               done="Queued cleanup again for {count} dead letter(s); rows not dead are left as they were.")
expire_now = action_calling(lambda ids: len(mailboxes_force_expire(mailbox_ids=ids)), name="expire_now",
                            description="Expire the selected active mailboxes now",
                            done="Expired {count} mailbox(es); their cleanup is queued.")


@admin.register(Mailbox)
class MailboxAdmin(ActionsOnlyAdmin):
    list_display = ["address", "owner", "status", "created_at", "expires_at", "message_count", "cleanup_state"]
    list_filter = ["status", "cleanup_state", "owner__plan"]
    search_fields = ["address", "owner__login", "id"]
    date_hierarchy = "created_at"
    list_select_related = ["owner"]
    show_full_result_count = False
    actions = [expire_now, retry_cleanup]  # each one checks its rows' state itself

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Mailbox._meta.fields]


class CleanupStateFilter(admin.SimpleListFilter):
    """Only the states a cleanup in this list can be in (it lists owed or settled ones)."""

    title = "cleanup state"
    parameter_name = "cleanup_state"

    # Pending and running together: every cleanup still owed (the first screen links here).
    OWED = "owed"

    def lookups(self, request, model_admin):
        return [(self.OWED, "owed (pending or running)")] + [
            (state.value, state.label) for state in CleanupState if state != CleanupState.NONE]

    def queryset(self, request, queryset):
        if self.value() == self.OWED:
            return queryset.filter(CLEANUPS.still_owed())
        return queryset.filter(cleanup_state=self.value()) if self.value() else queryset


@admin.register(Cleanup)
class CleanupAdmin(DeadLettersFirstAdmin):
    """Dead letters first; a row opens read-only with the buttons that apply to it."""

    list_title = "Cleanups: dead letters first, then the newest"
    owed_title = "Cleanup"
    list_display = ["address", "status", "cleanup_state", "attempts", "short_error", "cleanup_queued_at", "its_mailbox"]
    list_filter = [CleanupStateFilter, "status"]
    search_fields = ["address", "cleanup_last_error"]
    actions = [retry_cleanup]
    show_full_result_count = False
    fields = ["address", "owner", "status", "cleanup_state", "cleanup_attempts", "cleanup_last_error",
              "created_at", "expires_at", "expired_at", "deleted_at", "cleanup_queued_at", "cleanup_lease_until",
              "cleanup_done_at", "backend_id", "id"]
    readonly_fields = fields
    change_form_template = "admin/expiry/cleanup/change_form.html"

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(cleanup_state=CleanupState.NONE).select_related("owner")

    owed_work = CLEANUPS
    newest_first = F("cleanup_queued_at").desc(nulls_last=True)

    def case_name(self, cleanup: Cleanup) -> str:
        return cleanup.address

    @admin.display(description="last error")
    def short_error(self, cleanup: Cleanup) -> str:
        return cleanup.cleanup_last_error[:80]

    @admin.display(description="mailbox")
    def its_mailbox(self, cleanup: Cleanup) -> str:
        return mailbox_links(cleanup.id, "mailbox")

    @admin.display(description="attempts", ordering="cleanup_attempts")
    def attempts(self, cleanup: Cleanup) -> int:
        return cleanup.cleanup_attempts

    # The case file's buttons: what each calls, and what it says when it did or did not apply.
    BUTTONS = {
        "retry": (cleanup_requeue, "Cleanup queued again.", "Not a dead letter: nothing to retry."),
        "expire": (mailboxes_force_expire, "Expired; its cleanup is queued.", "Not active: nothing to expire."),
    }

    def get_urls(self):
        view = self.admin_site.admin_view(self.button_view)
        own = [path(f"<uuid:object_id>/{button}/", view, {"button": button}, name=f"expiry_cleanup_{button}")
               for button in self.BUTTONS]
        return own + super().get_urls()

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        if obj is not None:
            context["can_retry"] = obj.cleanup_state == CleanupState.DEAD
            context["can_expire"] = obj.status == MailboxStatus.ACTIVE
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)

    def button_view(self, request, object_id, button: str):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not super(ReadOnlyAdmin, self).has_change_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        service, done_text, not_applicable_text = self.BUTTONS[button]
        if service(mailbox_ids=[object_id]):
            self.message_user(request, done_text, messages.SUCCESS)
        else:
            self.message_user(request, not_applicable_text, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:expiry_cleanup_change", args=[object_id]))
