"""What each plan allows, in one table: every limit a plan sets, read the same way by
every app (mailboxes, sends, domains, the API's schema). The counts come from the
settings (RELAY_QUOTAS, RELAY_MAX_DOMAINS, each overridable per plan by its variables);
the lifetime caps are fixed here, never above RELAY_MAX_TTL_MS."""
from django.conf import settings

from accounts.models import Plan

# The longest lifetime each plan may ask for a mailbox.
TTL_CAP_MS = {
    Plan.FREE: 60 * 60 * 1000,
    Plan.PRO: 24 * 60 * 60 * 1000,
    Plan.ENTERPRISE: 7 * 24 * 60 * 60 * 1000,
}


def plan_limit(plan: str, name: str) -> int:
    """`name`'s limit on `plan`: a quota of RELAY_QUOTAS (active_mailboxes,
    sends_per_day, recipients_per_send, stored_bytes_per_mailbox), `domains`
    (RELAY_MAX_DOMAINS), or `ttl_cap_ms`."""
    if name == "domains":
        return settings.RELAY_MAX_DOMAINS[plan]
    if name == "ttl_cap_ms":
        return min(TTL_CAP_MS[Plan(plan)], settings.RELAY_MAX_TTL_MS)
    return settings.RELAY_QUOTAS[plan][name]
