"""Who is calling, for DRF: a Bearer API key or mailbox token, and anonymous creation's throttle."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.settings import api_settings

from django.conf import settings

from api.client import client_group_of
from api.scopes import InsufficientScope, route_scope
from mailboxes.keys import Caller, caller_for_secret

# Longer than any key or token Relay issues: anything longer is refused unhashed.
MAX_KEY_LENGTH = 200


class Principal(Caller):
    """A Caller as DRF wants its request.user: authenticated."""

    is_authenticated = True

    @classmethod
    def of(cls, caller: Caller) -> "Principal":
        return cls(owner=caller.owner, mailbox_id=caller.mailbox_id, api_key_id=caller.api_key_id,
                   scopes=caller.scopes)


def bearer_secret(header: str) -> str | None:
    """The secret of an `Authorization: Bearer` header, or None: the one parser of the API and /mcp."""
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or len(secret) > MAX_KEY_LENGTH:
        return None
    return secret


class BearerAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        key = bearer_secret(header)
        if key is None:
            raise exceptions.AuthenticationFailed("Use the header 'Authorization: Bearer <key>'.")
        caller = caller_for_secret(key, audience=settings.RELAY_API_RESOURCE)
        if caller is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return Principal.of(caller), key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) to a request without credentials.
        return challenge(credentials_sent=bool(request is not None and request.META.get("HTTP_AUTHORIZATION")))


def challenge(*, credentials_sent: bool) -> str:
    """The WWW-Authenticate of a 401 (RFC 6750 §3): `invalid_token` when credentials were
    sent and refused."""
    return 'Bearer realm="relay", error="invalid_token"' if credentials_sent else 'Bearer realm="relay"'


def caller_of(request) -> Principal | None:
    return request.user if isinstance(request.user, Principal) else None


def scope_covers(caller: Caller, scope: str | None) -> None:
    """InsufficientScope unless the caller's grant covers `scope`."""
    if not caller.may(scope):
        raise InsufficientScope(scope)


class AnyoneWithinScope(permissions.BasePermission):
    """Open to anyone; a caller who did authenticate stays within its grant's scopes."""

    def has_permission(self, request, view) -> bool:
        caller = caller_of(request)
        if caller is not None:
            scope_covers(caller, route_scope(view, request.method))
        return True


class IsPrincipal(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        caller = caller_of(request)
        if caller is None:
            return False
        scope_covers(caller, route_scope(view, request.method))
        return True


class IsAccount(permissions.BasePermission):
    """An account's API key; an anonymous mailbox token is not enough (403)."""

    message = "This needs an account's API key; a mailbox token only reaches its own mailbox."

    def has_permission(self, request, view) -> bool:
        caller = caller_of(request)
        if caller is None:
            return False
        if caller.is_anonymous:
            raise exceptions.PermissionDenied(self.message)
        scope_covers(caller, route_scope(view, request.method))
        return True


class AnonymousCreateThrottle(throttling.AnonRateThrottle):
    """Anonymous creations per client address. Owners with keys are not throttled here."""

    scope = "anon_create"

    def allow_request(self, request, view) -> bool:
        caller = caller_of(request)
        if caller is not None and not caller.is_anonymous:
            return True
        return super().allow_request(request, view)

    def get_rate(self) -> str:
        # Read when used, not at import, so the setting can change under a running test.
        return api_settings.DEFAULT_THROTTLE_RATES[self.scope]

    def get_cache_key(self, request, view) -> str:
        # Per client address, also for the holder of a mailbox token.
        return self.cache_format % {"scope": self.scope, "ident": client_group_of(request)}


class AccountRouteThrottle(throttling.ScopedRateThrottle):
    """The account routes per client address, each its own RELAY_SIGNUP_RATE, in the shared cache."""

    def get_rate(self) -> str:
        return api_settings.DEFAULT_THROTTLE_RATES[self.scope]

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_group_of(request)}


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Shows the Bearer scheme in /api/docs/ so "Authorize" works there."""

    target_class = BearerAuthentication
    name = "bearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key (rk_…) or a mailbox token (rt_…)."}
