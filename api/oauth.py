"""Relay as its own OAuth 2.1 authorization server, from django-oauth-toolkit (docs/agents.md,
"Connecting by URL"): the metadata documents (RFC 8414, RFC 9728), the authorization code
grant with PKCE S256, dynamic registration (RFC 7591) and client ID metadata documents,
token and revocation (RFC 7009) endpoints. The authorization endpoint, a consent page, is
the web inbox's (config/urls.py mounts it in this namespace)."""
import json
from types import SimpleNamespace
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import path
from oauth2_provider import views
from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher, _effective_max_age, _validate_client_id_url
from oauth2_provider.settings import oauth2_settings

from api.authentication import AccountRouteThrottle
from core.http import DeliveryTimedOut, PrivateAddress, TransportFailed, get_document


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def redirect_uri_allowed(uri: object) -> bool:
    """HTTPS, or http on a loopback host (a native agent's callback, RFC 8252)."""
    if not isinstance(uri, str):
        return False
    parts = urlsplit(uri)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)


class RegistrationAllowed:
    """Open dynamic registration, limited per client address (RELAY_OAUTH_REGISTER_RATE),
    of redirect URIs that are HTTPS or loopback."""

    def has_permission(self, request) -> bool:
        try:
            uris = json.loads(request.body or b"{}").get("redirect_uris") or []
        except (ValueError, AttributeError):
            uris = []
        if not isinstance(uris, list) or not all(redirect_uri_allowed(uri) for uri in uris):
            return False
        return AccountRouteThrottle().allow_request(request, SimpleNamespace(throttle_scope="oauth_register"))


class ClientDocumentFetcher(SafeMetadataFetcher):
    """An agent's client ID metadata document, fetched under the webhooks' address rules
    (core.http: a public address, pinned, one deadline, no redirect), capped in
    size; the toolkit checks what it says and caches it."""

    def fetch(self, client_id):
        _validate_client_id_url(client_id)
        limit = oauth2_settings.CIMD_MAX_DOCUMENT_SIZE
        try:
            status, headers, body = get_document(client_id, max_bytes=limit,
                                                 seconds=oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS)
        except (PrivateAddress, DeliveryTimedOut, TransportFailed) as exc:
            raise CIMDError(f"could not fetch the client ID document: {exc}") from None
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
        return document, _effective_max_age(headers.get("Cache-Control"))


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
    path("oauth/register", views.DynamicClientRegistrationView.as_view(), name="dcr-register"),
    path("oauth/register/<str:client_id>", views.DynamicClientRegistrationManagementView.as_view(),
         name="dcr-register-management"),
]
