"""Who really sent a message (docs/api.md, "Verdicts"): SPF, DKIM and DMARC by the field's
libraries, every look-up through core.dns within one budget per message (then temperror)."""
import base64
import logging
import re
import threading
from email.utils import getaddresses

import authres
import dkim
import dkim.crypto
import dkim.util
import spf
from authheaders.dmarc_lookup import DMARCException, lookup_receiver_record
from django.conf import settings
from publicsuffix2 import PublicSuffixList

from core import dns

logger = logging.getLogger(__name__)

PASS, FAIL, NONE, TEMPERROR, PERMERROR = "pass", "fail", "none", "temperror", "permerror"
RESULTS = (PASS, FAIL, "softfail", "neutral", NONE, TEMPERROR, PERMERROR)


def nothing_known(result: str = NONE) -> dict:
    """The verdict of a message nothing was checked of (`none`), or of one whose checks
    ran out of time as a whole (`temperror`)."""
    return {"spf": {"result": result, "domain": ""}, "dkim": [],
            "dmarc": {"result": result, "policy": None, "domain": ""}, "verdict": NONE}


def _domain_of(address: str) -> str:
    return address.rpartition("@")[2].strip().strip(">").lower().removesuffix(".")


# The blank line that ends a header block, and a DKIM-Signature header within one.
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_SIGNED = re.compile(rb"^dkim-signature\s*:", re.IGNORECASE | re.MULTILINE)


# dkimpy finds each signed header field by walking the header block from the bottom:
# a block of a million lines made each signature cost seconds. Real mail has a few dozen.
MAX_HEADER_LINES = 5000


def _parsed(raw: bytes) -> dkim.DKIM | None:
    """The message as dkimpy splits it; None when it cannot be split or has too many header
    lines. Without a DKIM-Signature, only the header block is split."""
    end = _HEADER_END.search(raw)
    if raw.count(b"\n", 0, end.start() if end is not None else len(raw)) > MAX_HEADER_LINES:
        logger.info("a message's header block is over %d lines: its DKIM and DMARC are not checked", MAX_HEADER_LINES)
        return None
    if end is not None and not _SIGNED.search(raw, 0, end.start()):
        raw = raw[:end.end()]
    try:
        return dkim.DKIM(raw, minkey=1024)
    except Exception:
        return None


def _from_domain(headers) -> str | None:
    """The one From domain DMARC aligns with; None when there is not exactly one."""
    values = [value.replace(b"\r\n", b"").decode("utf-8", "replace") for name, value in headers
              if name.lower() == b"from"]
    addresses = [address for _, address in getaddresses(values) if "@" in address]
    return _domain_of(addresses[0]) if len(values) == 1 and len(addresses) == 1 else None


def check_spf(*, ip: str | None, mail_from: str, helo: str, budget: dns.Budget) -> dict:
    domain = _domain_of(mail_from) if "@" in mail_from else (helo or "").lower()
    if not ip:
        return {"result": NONE, "domain": domain}
    dns.resolver()  # pyspf looks up through dnspython's default resolver: Relay's
    left = budget.left()
    if left <= 0:
        return {"result": TEMPERROR, "domain": domain}
    try:
        result, _ = spf.check2(i=ip, s=mail_from, h=helo or domain, timeout=left, querytime=left)
    except Exception as exc:  # pyspf's own errors on what it cannot parse
        logger.info("SPF check of %s from %s failed: %s", mail_from or helo, ip, exc)
        result = TEMPERROR
    return {"result": result if result in RESULTS else PERMERROR, "domain": domain}


# Bounds on what one message makes the verdict do: the first few signatures, bounded
# header lists, usual RSA sizes and exponents; refused ones are permerror before any arithmetic.
MAX_SIGNATURES = 5
MAX_SIGNED_HEADERS = 64
MAX_SIGNATURE_BYTES = 8192  # a real one is under 2 KB; dkimpy's b= search grows with the square of a longer one
MAX_KEY_BITS = 4096
KEY_EXPONENTS = (3, 65537)


class KeyRefused(Exception):
    """A DKIM key record whose key Relay will not compute with."""


def key_refusal(record: bytes) -> str | None:
    """Why the RSA key in DKIM key `record` is refused (too large, an unusual exponent,
    not a key at all), or None when it may be used. Ed25519 keys have one size."""
    try:
        tags = dkim.util.parse_tag_value(record)
    except Exception:
        return None  # dkimpy refuses a malformed record itself
    if tags.get(b"k", b"rsa") != b"rsa" or not tags.get(b"p"):
        return None
    try:
        key = dkim.crypto.parse_public_key(base64.b64decode(tags[b"p"]))
    except Exception:
        return None
    bits = key["modulus"].bit_length()
    if bits > MAX_KEY_BITS:
        return f"an RSA key of {bits} bits (at most {MAX_KEY_BITS} are checked)"
    if key["publicExponent"] not in KEY_EXPONENTS:
        return "an RSA key with an unusual public exponent"
    return None


def _signature_refusal(value: bytes) -> str | None:
    if len(value) > MAX_SIGNATURE_BYTES:
        return f"it is {len(value)} bytes long (at most {MAX_SIGNATURE_BYTES} are checked)"
    try:
        tags = dkim.util.parse_tag_value(value)
    except Exception:
        return None  # dkimpy says what is wrong with it
    signed = tags.get(b"h", b"").count(b":") + 1
    if signed > MAX_SIGNED_HEADERS:
        return f"it signs {signed} header fields (at most {MAX_SIGNED_HEADERS} are checked)"
    return None


def check_dkim(message: dkim.DKIM, budget: dns.Budget) -> list[dict]:
    """One result per DKIM-Signature, top first, for the first MAX_SIGNATURES of them."""
    signatures = [value for name, value in message.headers if name.lower() == b"dkim-signature"]
    if len(signatures) > MAX_SIGNATURES:
        logger.info("a message carries %d DKIM signatures; the first %d are checked", len(signatures), MAX_SIGNATURES)
    results = []
    for index, value in enumerate(signatures[:MAX_SIGNATURES]):
        key_found = []

        def key_record(name, timeout=None):
            records = dns.txt(name.decode() if isinstance(name, bytes) else name, budget)
            key_found.append(bool(records))
            if not records:
                return None
            record = records[0].encode()
            refusal = key_refusal(record)
            if refusal:
                raise KeyRefused(refusal)
            return record

        message.signature_fields = {}
        refusal = _signature_refusal(value)
        try:
            if refusal:
                raise KeyRefused(refusal)
            if budget.left() <= 0:
                raise dns.LookupFailed("no time left")
            valid = message.verify(idx=index, dnsfunc=key_record)
            result = PASS if valid else (FAIL if all(key_found) else PERMERROR)
        except dns.LookupFailed:
            result = TEMPERROR
        except KeyRefused as exc:
            logger.info("DKIM signature %d not checked: %s", index, exc)
            result = PERMERROR
        except dkim.ValidationError:
            result = FAIL  # the signature does not match the message (body or headers altered)
        except Exception as exc:  # a signature or key too malformed to check
            logger.info("DKIM signature %d could not be checked: %s", index, exc)
            result = PERMERROR
        fields = message.signature_fields or _tags(value)
        results.append({"result": result, "domain": fields.get(b"d", b"").decode("ascii", "replace").lower(),
                        "selector": fields.get(b"s", b"").decode("ascii", "replace").lower()})
    return results


def _tags(value: bytes) -> dict:
    try:
        return dkim.util.parse_tag_value(value)
    except Exception:
        return {}


_suffixes = None
_suffixes_lock = threading.Lock()


def organizational_domain(domain: str) -> str:
    """RFC 7489 §3.2: the public suffix and one label more (an unknown suffix: the last label)."""
    global _suffixes
    with _suffixes_lock:
        if _suffixes is None:
            _suffixes = PublicSuffixList()  # read once per process: the list is large
    return _suffixes.get_sld(domain, strict=True) or ".".join(domain.split(".")[-2:])


def _aligned(domain: str, from_domain: str, mode: str) -> bool:
    if not domain:
        return False
    return domain == from_domain if mode == "s" else organizational_domain(domain) == organizational_domain(from_domain)


def _policy_record(from_domain: str, budget: dns.Budget) -> tuple[dict, bool]:
    """The DMARC record that governs `from_domain` (RFC 7489 §6.6.3): its own, else its
    organizational domain's; and whether it is the latter. {} when neither has one."""
    def dmarc_record(name):
        records = [text for text in dns.txt(name, budget) if text.replace(" ", "").startswith("v=DMARC1")]
        return records[0] if len(records) == 1 else None

    record = lookup_receiver_record(from_domain, dnsfunc=dmarc_record)
    if record:
        return record, False
    organizational = organizational_domain(from_domain)
    if organizational != from_domain:
        return lookup_receiver_record(organizational, dnsfunc=dmarc_record), True
    return {}, False


def check_dmarc(from_domain: str | None, spf_result: dict, dkim_results: list[dict],
                budget: dns.Budget) -> tuple[dict, bool]:
    """DMARC's result for the From domain, and whether an SPF or DKIM pass aligns with it
    (what counts when the domain publishes no DMARC record)."""
    if from_domain is None:
        return {"result": NONE, "policy": None, "domain": ""}, False
    try:
        record, inherited = _policy_record(from_domain, budget)
    except dns.LookupFailed:
        return {"result": TEMPERROR, "policy": None, "domain": from_domain}, False
    except DMARCException:
        return {"result": PERMERROR, "policy": None, "domain": from_domain}, False
    aligned = (any(result["result"] == PASS and _aligned(result["domain"], from_domain, record.get("adkim", "r"))
                   for result in dkim_results)
               or (spf_result["result"] == PASS and _aligned(spf_result["domain"], from_domain, record.get("aspf", "r"))))
    if not record.get("p"):
        return {"result": NONE, "policy": None, "domain": from_domain}, aligned
    policy = record.get("sp", record["p"]) if inherited else record["p"]
    return {"result": PASS if aligned else FAIL, "policy": policy, "domain": from_domain}, aligned


def authenticate(raw: bytes, *, ip: str | None, mail_from: str, helo: str, spf_result: dict | None = None,
                 budget: dns.Budget | None = None) -> dict:
    """The verdict on `raw` as received from `ip` (`spf_result`: SPF as another server found
    it). pass: DMARC passes, or without DMARC an aligned DKIM or SPF pass; fail: DMARC fails."""
    budget = budget or dns.Budget()
    message = _parsed(raw)
    spf_found = spf_result or check_spf(ip=ip, mail_from=mail_from, helo=helo, budget=budget)
    dkim_found = check_dkim(message, budget) if message else []
    dmarc_found, aligned = check_dmarc(_from_domain(message.headers) if message else None, spf_found, dkim_found,
                                       budget)
    if dmarc_found["result"] == PASS or (dmarc_found["result"] == NONE and aligned):
        verdict = PASS
    elif dmarc_found["result"] == FAIL:
        verdict = FAIL
    else:
        verdict = NONE
    return {"spf": spf_found, "dkim": dkim_found, "dmarc": dmarc_found, "verdict": verdict}


def spf_of_mail_server(headers: list[list[str]], envelope_from: str) -> dict | None:
    """SPF as the receiving mail server found it: its topmost Authentication-Results only,
    under RELAY_AUTHSERV_ID, for the recorded envelope sender; None when nothing is trusted."""
    if not settings.RELAY_AUTHSERV_ID:
        return None
    topmost = next((value for name, value in headers if name.lower() == "authentication-results"), None)
    if topmost is None:
        return None
    try:
        parsed = authres.AuthenticationResultsHeader.parse_value(topmost)
    except Exception:
        logger.info("the topmost Authentication-Results does not parse; SPF taken as none")
        return None
    if (parsed.authserv_id or "").lower() != settings.RELAY_AUTHSERV_ID:
        logger.info("the topmost Authentication-Results is %r's, not the mail server's (%s); SPF taken as none",
                    parsed.authserv_id, settings.RELAY_AUTHSERV_ID)
        return None
    for result in parsed.results:
        if result.method != "spf":
            continue
        found = {f"{prop.type}.{prop.name}": prop.value for prop in result.properties}
        judged = found.get("smtp.mailfrom") or ""
        if judged and "@" not in judged:
            judged = f"postmaster@{judged}"  # RFC 8601 allows the domain alone
        if envelope_from and _domain_of(judged) != _domain_of(envelope_from):
            logger.info("the mail server's SPF result judged %r, not the envelope sender %r; SPF taken as none",
                        judged, envelope_from)
            return None
        sender = judged or found.get("smtp.helo") or ""
        return {"result": result.result if result.result in RESULTS else PERMERROR,
                "domain": _domain_of(sender) if "@" in sender else sender.lower()}
    return None
