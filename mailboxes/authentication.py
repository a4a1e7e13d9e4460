"""Who is calling: an owner's API key, or the token of one anonymous mailbox.

Both arrive as `Authorization: Bearer <key>`; only their SHA-256 is stored."""
import hashlib
import secrets
import uuid
from dataclasses import dataclass

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.settings import api_settings

from mailboxes.models import ApiKey, Mailbox, Owner, Plan

API_KEY_PREFIX = "rk_"
MAILBOX_TOKEN_PREFIX = "rt_"


def new_secret(prefix: str) -> tuple[str, str]:
    """A fresh key and the hash to store for it."""
    key = prefix + secrets.token_urlsafe(32)
    return key, hash_secret(key)


def hash_secret(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The caller. `owner` for an API key; `mailbox_id` for an anonymous mailbox token,
    which authorizes that one mailbox and nothing else."""

    owner: Owner | None = None
    mailbox_id: uuid.UUID | None = None
    is_authenticated: bool = True

    @property
    def plan(self) -> str:
        return self.owner.plan if self.owner else Plan.FREE


class BearerAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key or len(key) > 200:
            raise exceptions.AuthenticationFailed("Use the header 'Authorization: Bearer <key>'.")
        digest = hash_secret(key)
        if key.startswith(MAILBOX_TOKEN_PREFIX):
            mailbox_id = Mailbox.objects.filter(token_hash=digest).values_list("id", flat=True).first()
            if mailbox_id:
                return Principal(mailbox_id=mailbox_id), key
        else:
            api_key = ApiKey.objects.select_related("owner").filter(key_hash=digest, revoked_at=None).first()
            if api_key:
                return Principal(owner=api_key.owner), key
        raise exceptions.AuthenticationFailed("Invalid or revoked API key.")

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) to a request without credentials.
        return 'Bearer realm="relay"'


class IsPrincipal(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, Principal)


class AnonymousCreateThrottle(throttling.AnonRateThrottle):
    """Anonymous creations per client address. Owners with keys are not throttled here."""

    scope = "anon_create"

    def allow_request(self, request, view) -> bool:
        if isinstance(request.user, Principal) and request.user.owner is not None:
            return True
        return super().allow_request(request, view)

    def get_rate(self) -> str:
        # Read when used, not at import, so the setting can change under a running test.
        return api_settings.DEFAULT_THROTTLE_RATES[self.scope]

    def get_cache_key(self, request, view) -> str:
        # Per client address, also for the holder of a mailbox token.
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Shows the Bearer scheme in /api/docs/ so "Authorize" works there."""

    target_class = BearerAuthentication
    name = "bearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key (rk_…) or a mailbox token (rt_…)."}
