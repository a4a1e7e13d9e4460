"""Who owns mailboxes: accounts, what each plan allows, their API keys and one-time tokens;
status changes go through accounts.services only."""
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower


class Plan(models.TextChoices):
    FREE = "free"
    PRO = "pro"
    ENTERPRISE = "enterprise"


# What each plan allows, in one table: every limit a plan sets, read the same way by every
# app (mailboxes, sends, domains, the API's schema). The counts come from the settings
# (RELAY_QUOTAS, RELAY_MAX_DOMAINS, each overridable per plan by its variables); the
# lifetime caps are fixed here, never above RELAY_MAX_TTL_MS.
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


class AccountStatus(models.TextChoices):
    """provisioned: signed up, not activated yet; active: may hold keys and mailboxes;
    suspended: its keys are refused (403) and its mailboxes refuse mail."""

    PROVISIONED = "provisioned"
    ACTIVE = "active"
    SUSPENDED = "suspended"


# What a login may look like (docs/api.md). Accounts migrated from before sign-up kept the
# names they had; every new login matches this.
LOGIN_PATTERN = r"^[a-z0-9_-]{3,32}$"


class Account(models.Model):
    # Null for an account made by `createapikey` without --email, and for the owners that
    # existed before accounts had emails: unique among the rest, ignoring case.
    email = models.EmailField(max_length=254, null=True, blank=True)
    login = models.CharField(max_length=100, unique=True)
    plan = models.CharField(max_length=16, choices=Plan.choices, default=Plan.FREE)
    status = models.CharField(max_length=12, choices=AccountStatus.choices, default=AccountStatus.PROVISIONED)
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    suspended_at = models.DateTimeField(null=True, blank=True)
    unsuspended_at = models.DateTimeField(null=True, blank=True)
    # Live mailboxes, counted by a conditional UPDATE at creation and given back at the end.
    live_mailboxes = models.PositiveIntegerField(default=0)
    # Who the OAuth toolkit's grants and tokens belong to (it keys them by a Django user):
    # made at the account's first web inbox sign-in, never able to log in to anything else.
    oauth_user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="relay_account")

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("email"), name="account_email_unique_ci"),
        ]

    def __str__(self) -> str:
        return self.login


class ApiKey(models.Model):
    """An account's API key. Only its SHA-256 is stored: keys are 256-bit random tokens,
    so a fast hash is enough, and lookups stay one indexed equality."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="api_keys")
    prefix = models.CharField(max_length=12, help_text="The key's first characters, to tell keys apart.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Written at most once a minute per key (accounts.credentials), not on every request.
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.account})"


class TokenAction(models.TextChoices):
    ACTIVATION = "activation"
    KEY_RECOVERY = "key_recovery"
    SIGN_IN = "sign_in"


class Token(models.Model):
    """A one-time token, mailed as a signed link and a 5-digit code; only hashes are kept,
    so a copy of this table activates nothing."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="tokens")
    action = models.CharField(max_length=16, choices=TokenAction.choices)
    secret_hash = models.CharField(max_length=64, unique=True)
    code_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    # Wrong codes tried against it; at accounts.tokens.MAX_WRONG_CODES it is burnt.
    wrong_codes = models.PositiveSmallIntegerField(default=0)

    class Meta:
        indexes = [
            # "The account's usable tokens of this action" ({email, code} activation).
            models.Index(fields=["account", "action"], condition=Q(consumed_at=None), name="token_usable"),
        ]

    def __str__(self) -> str:
        return f"{self.action} token of {self.account}"
