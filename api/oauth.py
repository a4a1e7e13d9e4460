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

from api.authentication import AccountRouteThrottle


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
