"""Every DNS look-up goes through here: RELAY_DNS_RESOLVERS within one budget per message or
verification, installed as dnspython's default (verifications ask uncached)."""
import threading
import time

import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver
from django.conf import settings

CACHE_ENTRIES = 50_000


class LookupFailed(Exception):
    """No usable answer in time: the budget ran out, or the servers failed (SERVFAIL,
    REFUSED, no reply). A verdict calls it temperror; a verification, unchecked."""


class Budget:
    """The time left for the look-ups of one message or one verification."""

    def __init__(self, seconds: float | None = None) -> None:
        self.deadline = time.monotonic() + (settings.RELAY_DNS_TIMEOUT_SECONDS if seconds is None else seconds)

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


_lock = threading.Lock()
_resolvers: dict[bool, dns.resolver.Resolver] = {}


def _build(cached: bool) -> dns.resolver.Resolver:
    if settings.RELAY_DNS_RESOLVERS:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [dns.nameserver.Do53Nameserver(host, port) for host, port in settings.RELAY_DNS_RESOLVERS]
    else:
        resolver = dns.resolver.Resolver()
    resolver.timeout = resolver.lifetime = settings.RELAY_DNS_TIMEOUT_SECONDS
    if cached:
        resolver.cache = dns.resolver.LRUCache(CACHE_ENTRIES)
    return resolver


def resolver(*, cached: bool = True) -> dns.resolver.Resolver:
    """This process's resolver for the configured servers (built on first use)."""
    with _lock:
        if cached not in _resolvers:
            _resolvers[cached] = _build(cached)
            if cached:
                dns.resolver.default_resolver = _resolvers[cached]
        return _resolvers[cached]


def reset() -> None:
    """Forget the resolvers, so the next look-up reads the settings again (tests that
    point Relay at another server)."""
    with _lock:
        _resolvers.clear()
        dns.resolver.default_resolver = None


def lookup(name: str, rdtype: str, budget: Budget, *, cached: bool = True) -> list:
    """The records of `rdtype` at `name`; [] when the name or the type does not exist.
    LookupFailed when no answer came within the budget."""
    left = budget.left()
    if left <= 0:
        raise LookupFailed(f"no time left to look up {rdtype} {name}")
    try:
        answer = resolver(cached=cached).resolve(name, rdtype, lifetime=left, search=False, raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return []
    except dns.exception.DNSException as exc:
        raise LookupFailed(f"{rdtype} {name}: {exc}") from None
    return list(answer.rrset or [])


def txt(name: str, budget: Budget, *, cached: bool = True) -> list[str]:
    """The TXT records at `name`, each one string (its character-strings joined)."""
    return [b"".join(record.strings).decode("utf-8", "replace") for record in lookup(name, "TXT", budget, cached=cached)]


def mx(name: str, budget: Budget, *, cached: bool = True) -> list[str]:
    """The hosts the MX records at `name` name, lowercase, without the final dot."""
    return [record.exchange.to_text(omit_final_dot=True).lower() for record in lookup(name, "MX", budget, cached=cached)]
