"""Who is calling, for DRF: a Bearer API key, mailbox token or OAuth access token, as
accounts.identity.authenticate parses it; what each
OAuth scope opens (one table for the routes and the MCP tools); anonymous creation's throttle."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.settings import api_settings

from django.conf import settings

from accounts.identity import Caller, authenticate
from core.client_address import client_group_of
from core.rate_limits import rate_limit_take

# --- what each OAuth scope opens (docs/agents.md, "Scopes") ---------------------------------------
# One table for the REST routes and the MCP tools. An API key or a mailbox token opens
# everything its owner may do; an access token opens what its scopes name, and no route
# that is not in this table (keys, webhooks, the account itself stay an API key's).
MAILBOXES, MAIL_READ, MAIL_SEND, DOMAINS = "mailboxes", "mail:read", "mail:send", "domains"
ALL = (MAILBOXES, MAIL_READ, MAIL_SEND, DOMAINS)

# A REST view (by class name): the scope of each method, or of all of them.
ROUTES: dict[str, str | dict[str, str]] = {
    "IndexView": MAILBOXES, "WhoAmIView": MAILBOXES,
    "MailboxCollectionView": MAILBOXES, "MailboxDetailView": MAILBOXES, "MailboxRenewView": MAILBOXES,
    "SandboxPasswordView": MAILBOXES, "SandboxFaultsView": MAILBOXES,
    "MessageSearchView": MAIL_READ, "MessageCollectionView": {"GET": MAIL_READ, "POST": MAIL_SEND},
    "MessageDetailView": MAIL_READ, "MessageRawView": MAIL_READ, "AttachmentView": MAIL_READ,
    "OutboundCollectionView": MAIL_SEND, "OutboundDetailView": MAIL_SEND,
    "ReplyView": MAIL_SEND, "ForwardView": MAIL_SEND, "ReleaseView": MAIL_SEND, "ThreadCollectionView": MAIL_READ, "ThreadDetailView": MAIL_READ,
    "DomainCollectionView": DOMAINS, "DomainDetailView": DOMAINS, "DomainVerifyView": DOMAINS,
    "HtmlCheckView": MAIL_READ, "LinkCheckView": MAIL_READ, "SpamCheckView": MAIL_READ, "HeaderCheckView": MAIL_READ,
    "SuppressionCollectionView": MAIL_SEND, "SuppressionDetailView": MAIL_SEND,
}
# The held waits and event streams (api/waiting.py) read mail.
WAITS = MAIL_READ

TOOLS: dict[str, str] = {
    "create_mailbox": MAILBOXES, "list_mailboxes": MAILBOXES, "get_mailbox": MAILBOXES, "renew_mailbox": MAILBOXES,
    "create_sandbox": MAILBOXES, "set_faults": MAILBOXES,
    "delete_mailbox": MAILBOXES,
    "list_messages": MAIL_READ, "get_message": MAIL_READ, "wait_for_message": MAIL_READ, "wait_for_code": MAIL_READ,
    "search_messages": MAIL_READ, "get_attachment": MAIL_READ, "check_message": MAIL_READ, "list_threads": MAIL_READ, "get_thread": MAIL_READ,
    "send_message": MAIL_SEND, "reply_to_message": MAIL_SEND, "forward_message": MAIL_SEND,
    "release_message": MAIL_SEND,
    "wait_for_delivery": MAIL_READ,
    "create_domain": DOMAINS, "list_domains": DOMAINS, "verify_domain": DOMAINS, "delete_domain": DOMAINS,
}


def route_scope(view, method: str) -> str | None:
    """The scope a REST view's `method` needs, or None where no access token may go."""
    scope = ROUTES.get(type(view).__name__)
    return scope.get(method) if isinstance(scope, dict) else scope


def insufficient_scope(scope: str | None) -> str:
    """The WWW-Authenticate of a 403 for a token whose grant does not cover `scope` (RFC 6750 §3.1)."""
    wanted = f', scope="{scope}"' if scope else ""
    return f'Bearer realm="relay", error="insufficient_scope"{wanted}'


class InsufficientScope(exceptions.PermissionDenied):
    """An access token whose grant does not cover what it asked for (403, and the scope
    to ask for in WWW-Authenticate: api.errors)."""

    def __init__(self, scope: str | None):
        self.scope = scope
        super().__init__(f"This access token's grant does not cover this; it needs the scope {scope}." if scope
                         else "An access token cannot do this; it needs an API key.")


# --- who is calling -------------------------------------------------------------------------------
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
        caller = authenticate(key, audience=settings.RELAY_API_RESOURCE)
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


class CountedThrottle(throttling.BaseThrottle):
    """A limit per client address, counted atomically (core.rate_limits), at the rate
    DEFAULT_THROTTLE_RATES gives its scope (read when used, so a test may change it)."""

    scope: str | None = None
    retry_after: int | None = None

    def counted(self, request, scope: str) -> bool:
        self.retry_after = rate_limit_take(scope=scope, ident=client_group_of(request),
                                           rate=api_settings.DEFAULT_THROTTLE_RATES[scope]) or None
        return self.retry_after is None

    def wait(self) -> int | None:
        return self.retry_after


class AnonymousCreateThrottle(CountedThrottle):
    """Anonymous creations per client address, also for the holder of a mailbox token.
    Owners with keys are not throttled here."""

    scope = "anon_create"

    def allow_request(self, request, view) -> bool:
        caller = caller_of(request)
        if caller is not None and not caller.is_anonymous:
            return True
        return self.counted(request, self.scope)


class AccountRouteThrottle(CountedThrottle):
    """The account routes per client address, each its own scope (the view's throttle_scope)."""

    def allow_request(self, request, view) -> bool:
        self.scope = getattr(view, "throttle_scope", None)
        return True if not self.scope else self.counted(request, self.scope)


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Shows the Bearer scheme in /api/docs/ so "Authorize" works there."""

    target_class = BearerAuthentication
    name = "bearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key (rk_…) or a mailbox token (rt_…)."}
