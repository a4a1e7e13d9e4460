"""The client's address, for every per-client limit (anonymous creation, admin login).
Each limit counts it by relay.clients.client_group: an IPv6 client is its /64.

REMOTE_ADDR, unless RELAY_TRUSTED_PROXIES says N reverse proxies stand in front: then
the N-th entry of X-Forwarded-For from the right, the address the outermost trusted
proxy saw. Entries further left are whatever the client wrote, so they never count."""
from django.conf import settings

from relay.clients import client_group


def client_address(request) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.RELAY_TRUSTED_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if not proxies or not forwarded:
        return remote
    entries = [entry.strip() for entry in forwarded.split(",") if entry.strip()]
    return entries[-min(proxies, len(entries))] if entries else remote


def client_group_of(request) -> str:
    """What the admin login lockout counts (AXES_CLIENT_IP_CALLABLE): the client's
    address, an IPv6 one as its /64 (PostgreSQL stores a network in its inet column)."""
    return client_group(client_address(request))
