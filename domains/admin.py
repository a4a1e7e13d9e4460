"""Domains in the admin, read-only: who added which name, whether it is verified, and
what its records were found to be. The private key is never shown."""
from django.contrib import admin

from domains.models import Domain


@admin.register(Domain)
class DomainAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "status", "created_at", "verified_at", "checked_at"]
    list_filter = ["status"]
    search_fields = ["name", "owner__login"]
    exclude = ["dkim_private_key"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
