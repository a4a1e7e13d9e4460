"""Accounts in the admin. Status is read-only here: it changes only through the actions
below, which call accounts.services (the timestamp rules live there)."""
from django.contrib import admin, messages

from accounts.errors import RelayError
from accounts.models import Account, ApiKey, Token
from accounts.services import account_suspend, account_unsuspend


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # a key's secret is shown once, to whoever makes it (API or createapikey)


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ["login", "email", "plan", "status", "created_at", "activated_at", "suspended_at"]
    list_filter = ["status", "plan"]
    search_fields = ["login", "email"]
    fields = ["login", "email", "plan", "status", "created_at", "status_changed_at", "activated_at",
              "suspended_at", "unsuspended_at", "live_mailboxes"]
    readonly_fields = ["status", "created_at", "status_changed_at", "activated_at", "suspended_at",
                       "unsuspended_at", "live_mailboxes"]
    inlines = [ApiKeyInline]
    actions = ["suspend", "unsuspend"]

    def has_add_permission(self, request) -> bool:
        # An account is made with its activation token and mail (sign-up) or active with
        # a key (`createapikey`), never bare.
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # it would delete its mailboxes' rows without deprovisioning them

    def _apply(self, request, queryset, change, verb: str) -> None:
        done = 0
        for account in queryset:
            try:
                change(account=account)
                done += 1
            except RelayError as exc:
                self.message_user(request, f"{account.login}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{verb} {done} account(s).", messages.SUCCESS)

    @admin.action(description="Suspend: refuse their keys (403) and their mailboxes' mail")
    def suspend(self, request, queryset) -> None:
        self._apply(request, queryset, account_suspend, "Suspended")

    @admin.action(description="Unsuspend (never-activated accounts go back to provisioned)")
    def unsuspend(self, request, queryset) -> None:
        self._apply(request, queryset, account_unsuspend, "Unsuspended")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are made through the API (activation, recovery, POST /keys) or `manage.py
    createapikey`, which show the key once; here they can be looked up and revoked
    (set "revoked at")."""

    list_display = ["prefix", "account", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "account__plan"]
    search_fields = ["prefix", "account__login"]
    fields = ["account", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["account", "prefix", "created_at", "last_used_at"]
    list_select_related = ["account"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Token)
class TokenAdmin(admin.ModelAdmin):
    """Activation and recovery tokens: when they were made, used, burnt. The secret and
    code are not stored, so there is nothing here to copy."""

    list_display = ["id", "account", "action", "created_at", "expires_at", "consumed_at", "wrong_codes"]
    list_filter = ["action"]
    search_fields = ["account__login", "account__email"]
    list_select_related = ["account"]
    exclude = ["secret_hash", "code_hash"]

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields if field.name not in self.exclude]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
