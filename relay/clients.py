"""Which client a per-client limit counts. An IPv4 address is one client; an IPv6 client
is its /64, the block one subscriber is given, so that walking through the addresses of
one's own /64 earns nothing (docs/configuration.md, "Limits")."""
import ipaddress


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
