"""The DNS records a domain publishes for Relay, and what a look-up finds of each.

MX names RELAY_MX_HOST, so mail for the domain comes to Relay; the DKIM key lets any
receiver check what Relay signs for the domain. Those two make a domain verified. SPF
and DMARC are recommended: reported, not required."""
from django.conf import settings

from core import dns
from domains.models import Domain

OK, MISSING, WRONG, UNCHECKED = "ok", "missing", "wrong", "unchecked"
REQUIRED = ("mx", "dkim")
SPF_RECORD = "v=spf1 mx ~all"
DMARC_RECORD = "v=DMARC1; p=none"


def dkim_name(domain: Domain) -> str:
    return f"{domain.selector}._domainkey.{domain.name}"


def dkim_record(public_key: str) -> str:
    return f"v=DKIM1; k=rsa; p={public_key}"


def to_publish(domain: Domain) -> list[dict]:
    """The records to publish, each with what the last verification found of it."""
    wanted = [
        ("mx", "MX", domain.name, settings.RELAY_MX_HOST),
        ("spf", "TXT", domain.name, SPF_RECORD),
        ("dkim", "TXT", dkim_name(domain), dkim_record(domain.dkim_public_key)),
        ("dmarc", "TXT", f"_dmarc.{domain.name}", DMARC_RECORD),
    ]
    return [{"type": rtype, "name": name, "value": value, "status": domain.record_status.get(kind, UNCHECKED)}
            for kind, rtype, name, value in wanted]


def _tags(record: str) -> dict[str, str]:
    """A DKIM or DMARC record's tag=value pairs (RFC 6376 §3.2), whitespace removed."""
    tags = {}
    for part in record.split(";"):
        name, _, value = part.partition("=")
        tags[name.strip().lower()] = "".join(value.split())
    return tags


def _one_of(found: list[str], matches, candidates) -> str:
    if any(matches(item) for item in found):
        return OK
    return WRONG if any(candidates(item) for item in found) else MISSING


def check(domain: Domain) -> dict[str, str]:
    """Look each record up (uncached, within one budget): {kind: ok | missing | wrong |
    unchecked}, unchecked where no answer came in time."""
    budget = dns.Budget()
    checks = {
        "mx": (dns.mx, domain.name, lambda host: host == settings.RELAY_MX_HOST, lambda host: True),
        "spf": (dns.txt, domain.name, lambda text: " ".join(text.lower().split()) == SPF_RECORD,
                lambda text: text.lower().startswith("v=spf1")),
        "dkim": (dns.txt, dkim_name(domain), lambda text: _tags(text).get("p") == domain.dkim_public_key,
                 lambda text: True),
        "dmarc": (dns.txt, f"_dmarc.{domain.name}", lambda text: text.replace(" ", "").upper().startswith("V=DMARC1;"),
                  lambda text: True),
    }
    found = {}
    for kind, (look, name, matches, candidates) in checks.items():
        try:
            found[kind] = _one_of(look(name, budget, cached=False), matches, candidates)
        except dns.LookupFailed:
            found[kind] = UNCHECKED
    return found
