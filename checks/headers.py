"""What bulk-mail receivers (Gmail, Yahoo) require of a sender, judged on one message:
one-click unsubscribe (RFC 8058), a Message-ID, a Date, DKIM aligned with From."""
import re
from email.utils import getaddresses, parsedate_to_datetime

from mailboxes.mail_format import header
from relay.verdicts import organizational_domain

URI = re.compile(r"<([^<>]*)>")
MESSAGE_ID = re.compile(r"^\s*<[^<>@\s]+@[^<>@\s]+>\s*$")
SIGNED_FIELDS = re.compile(r"(?:^|;)\s*h\s*=\s*([^;]*)", re.IGNORECASE)


def _check(name: str, ok: bool, detail: str) -> dict:
    return {"name": name, "ok": ok, "detail": detail}


def _unsubscribe_uris(headers: list) -> list[str]:
    return [uri.strip() for uri in URI.findall(header(headers, "List-Unsubscribe"))]


def _from_domain(headers: list) -> str:
    addresses = [address for _, address in getaddresses([header(headers, "From")]) if "@" in address]
    return addresses[0].rpartition("@")[2].lower().rstrip(".") if len(addresses) == 1 else ""


def _signed_by_aligned(headers: list, authentication: dict, from_domain: str) -> list[set[str]]:
    """The signed header fields of each passing DKIM signature aligned with From."""
    signatures = [value for name, value in headers if name.lower() == "dkim-signature"]
    signed = []
    for result, value in zip(authentication.get("dkim") or [], signatures):
        if result.get("result") == "pass" and from_domain and result.get("domain") and (
                organizational_domain(result["domain"]) == organizational_domain(from_domain)):
            fields = SIGNED_FIELDS.search(value.replace("\r\n", "").replace("\n", ""))
            signed.append({field.strip().lower() for field in (fields.group(1) if fields else "").split(":")})
    return signed


def headers_report(headers: list, authentication: dict) -> dict:
    """{"checks": [{"name", "ok", "detail"}]} in a fixed order."""
    checks = []
    uris = _unsubscribe_uris(headers)
    usable = [uri for uri in uris if uri.lower().startswith("https://") or (
        uri.lower().startswith("mailto:") and "@" in uri)]
    if not header(headers, "List-Unsubscribe"):
        checks.append(_check("list_unsubscribe", False, "No List-Unsubscribe header."))
    elif not usable:
        checks.append(_check("list_unsubscribe", False,
                             "List-Unsubscribe holds no <https:…> or <mailto:…> URI in angle brackets."))
    else:
        checks.append(_check("list_unsubscribe", True, "List-Unsubscribe: " + ", ".join(usable)))

    from_domain = _from_domain(headers)
    signed = _signed_by_aligned(headers, authentication, from_domain)
    post = header(headers, "List-Unsubscribe-Post").strip()
    https = [uri for uri in uris if uri.lower().startswith("https://")]
    if post.replace(" ", "").lower() != "list-unsubscribe=one-click":
        detail = "No List-Unsubscribe-Post header." if not post else f"List-Unsubscribe-Post is {post!r}, " \
                 "not 'List-Unsubscribe=One-Click'."
        checks.append(_check("one_click_unsubscribe", False, detail))
    elif not https:
        checks.append(_check("one_click_unsubscribe", False, "One-click unsubscribe needs an https: URI in "
                             "List-Unsubscribe (RFC 8058)."))
    elif not any({"list-unsubscribe", "list-unsubscribe-post"} <= fields for fields in signed):
        checks.append(_check("one_click_unsubscribe", False, "List-Unsubscribe and List-Unsubscribe-Post are not "
                             "both covered by a valid DKIM signature aligned with From (RFC 8058)."))
    else:
        checks.append(_check("one_click_unsubscribe", True, "One-click unsubscribe to " + https[0]))

    message_id = header(headers, "Message-ID")
    checks.append(_check("message_id", bool(MESSAGE_ID.match(message_id)),
                         f"Message-ID: {message_id.strip()}" if MESSAGE_ID.match(message_id) else
                         ("No Message-ID header." if not message_id else f"Message-ID {message_id.strip()!r} is not "
                          "of the form <left@right>.")))

    date = header(headers, "Date")
    try:
        parsed = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError, IndexError):
        parsed = None
    checks.append(_check("date", parsed is not None, f"Date: {date.strip()}" if parsed is not None else (
        "No Date header." if not date else f"Date {date.strip()!r} cannot be read (RFC 5322).")))

    passing = [result["domain"] for result in authentication.get("dkim") or [] if result.get("result") == "pass"]
    if not from_domain:
        checks.append(_check("dkim_aligned", False, "From does not hold exactly one address."))
    elif signed:
        checks.append(_check("dkim_aligned", True, f"A valid DKIM signature of a domain aligned with {from_domain}."))
    elif passing:
        checks.append(_check("dkim_aligned", False, f"Valid DKIM signatures only by {', '.join(passing)}, "
                             f"not aligned with From ({from_domain})."))
    else:
        checks.append(_check("dkim_aligned", False, "No valid DKIM signature."))
    return {"checks": checks}
