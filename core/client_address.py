"""The client's address, for every per-client limit (anonymous creation, admin login, SMTP
clients). Each limit counts it by `client_group`: an IPv4 address is one client; an IPv6
client is its /64, the block one subscriber is given, so that walking through the
addresses of one's own /64 earns nothing (docs/configuration.md, "Limits").

REMOTE_ADDR, unless RELAY_TRUSTED_PROXIES says N reverse proxies stand in front: then
the N-th entry of X-Forwarded-For from the right, the address the outermost trusted
proxy saw. Entries further left are whatever the client wrote, so they never count."""
import ipaddress

from django.conf import settings


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


def client_group(address: str) -> str:
    """The key a per-client limit counts `address` under: the address itself for IPv4
    (or anything that is not an IP address), its /64 network for IPv6."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
