"""Relay as its own OAuth 2.1 authorization server, from django-oauth-toolkit (docs/agents.md,
"Connecting by URL"): the metadata documents (RFC 8414, RFC 9728), the authorization code
grant with PKCE S256, dynamic registration (RFC 7591) and its updates (RFC 7592) under one
rule, client ID metadata documents, token and revocation (RFC 7009) endpoints. The
authorization endpoint, a consent page, is the web inbox's (config/urls.py mounts it in this
namespace); the sources its policy lets the consent's answer go to are built by
accounts.oauth.consent_form_action, from the redirect URIs' rule this registration checks."""
import json
from types import SimpleNamespace

from django.conf import settings
from django.http import JsonResponse
from django.urls import path
from oauth2_provider import views
from oauth2_provider.cimd import (CIMDError, SafeMetadataFetcher, _effective_max_age, _validate_client_id_url,
                                  is_cimd_client_id)
from oauth2_provider.settings import oauth2_settings

from accounts.oauth import redirect_uri_allowed
from api.authentication import AccountRouteThrottle
from core.http import DeliveryTimedOut, PrivateAddress, TransportFailed, get_document
from core.pools import CLIENT_DOCUMENTS


# What the authorization server offers (its metadata says the same): the code grant with
# refresh tokens, answered with a code.
GRANT_TYPES = {"authorization_code", "refresh_token"}
RESPONSE_TYPES = {"code"}


def client_metadata_problem(data: object) -> tuple[str, str] | None:
    """What is wrong with a client's metadata (RFC 7591 §2), as (error, description), or None:
    the one rule a registration and an update (RFC 7592 §2.2) both meet. What the toolkit
    checks itself (the JSON, the types, a redirect URI for the code grant) it still checks."""
    if not isinstance(data, dict):
        return None
    uris = data.get("redirect_uris") or []
    if not isinstance(uris, list) or not all(redirect_uri_allowed(uri) for uri in uris):
        return "invalid_redirect_uri", "A redirect URI must be https, or http on a loopback host (RFC 8252)."
    for field, offered in (("grant_types", GRANT_TYPES), ("response_types", RESPONSE_TYPES)):
        asked = data.get(field) or []
        if not isinstance(asked, list) or not all(isinstance(item, str) for item in asked) or not set(asked) <= offered:
            return "invalid_client_metadata", f"{field} may hold only {', '.join(sorted(offered))}."
    return None


def _metadata_refused(request) -> JsonResponse | None:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return None  # the toolkit answers invalid_client_metadata
    problem = client_metadata_problem(data)
    if problem is None:
        return None
    error, description = problem
    return JsonResponse({"error": error, "error_description": description}, status=400)


class RegistrationAllowed:
    """Open dynamic registration, limited per client address (RELAY_OAUTH_REGISTER_RATE); what
    a client may register is client_metadata_problem's, checked before this."""

    def has_permission(self, request) -> bool:
        return AccountRouteThrottle().allow_request(request, SimpleNamespace(throttle_scope="oauth_register"))


class Registration(views.DynamicClientRegistrationView):
    """RFC 7591's registration, under client_metadata_problem's rule."""

    def post(self, request, *args, **kwargs):
        return _metadata_refused(request) or super().post(request, *args, **kwargs)


class RegistrationManagement(views.DynamicClientRegistrationManagementView):
    """RFC 7592's read, update and delete of a registration, by its registration access token;
    an update meets the very rule a registration does, or a client could register a good
    callback and then swap in one no registration would take."""

    def put(self, request, *args, **kwargs):
        return _metadata_refused(request) or super().put(request, *args, **kwargs)


class ClientDocumentFetcher(SafeMetadataFetcher):
    """An agent's client ID metadata document, fetched under the webhooks' address rules
    (core.http: a public address, pinned, one deadline, no redirect), capped in
    size; the toolkit checks what it says and caches it."""

    def fetch(self, client_id):
        _validate_client_id_url(client_id)
        limit = oauth2_settings.CIMD_MAX_DOCUMENT_SIZE
        try:
            answer = get_document(client_id, max_bytes=limit, seconds=oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS)
        except (PrivateAddress, DeliveryTimedOut, TransportFailed) as exc:
            raise CIMDError(f"could not fetch the client ID document: {exc}") from None
        status, headers, body = answer.status, answer.headers, answer.body  # headers: any case
        media_type = headers.get("Content-Type", "").split(";")[0].strip().lower()
        if status != 200 or not (media_type == "application/json" or
                                 (media_type.startswith("application/") and media_type.endswith("+json"))):
            raise CIMDError(f"the client ID document answered {status} {media_type!r}")
        if len(body) > limit:
            raise CIMDError("the client ID document is too large")
        try:
            document = json.loads(body)
        except ValueError:
            raise CIMDError("the client ID document is not JSON") from None
        if not isinstance(document, dict):
            raise CIMDError("the client ID document is not a JSON object")
        # The one rule a registration and its update meet (client_metadata_problem): a
        # document may name no callback a registration could not.
        problem = client_metadata_problem(document)
        if problem is not None:
            raise CIMDError(f"the client ID document is refused: {problem[1]}")
        return document, _effective_max_age(headers.get("Cache-Control"))


def consent_pool(request, kwargs):
    """The consent page of an agent whose client ID is a URL may fetch its document from a
    server the agent chose: in the client documents' own threads, never the shared ones."""
    client_id = request.GET.get("client_id") or (request.POST.get("client_id") if request.method == "POST" else "")
    return CLIENT_DOCUMENTS if client_id and is_cimd_client_id(client_id) else None


class ProtectedResource(views.OAuthProtectedResourceMetadataView):
    """RFC 9728's document for `/mcp`, at the root and path-suffixed alike: one resource."""

    def get_resource(self, request):
        return settings.RELAY_MCP_RESOURCE


app_name = "oauth2_provider"
urlpatterns = [
    path(".well-known/oauth-authorization-server", views.OAuthServerMetadataView.as_view(),
         name="oauth-server-metadata"),
    path(".well-known/oauth-protected-resource", ProtectedResource.as_view(), name="oauth-resource-metadata"),
    path(".well-known/oauth-protected-resource/mcp", ProtectedResource.as_view(), name="oauth-resource-metadata-mcp"),
    path("oauth/token", views.TokenView.as_view(), name="token"),
    path("oauth/revoke", views.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register", Registration.as_view(), name="dcr-register"),
    path("oauth/register/<str:client_id>", RegistrationManagement.as_view(), name="dcr-register-management"),
]
