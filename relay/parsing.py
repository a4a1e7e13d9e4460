"""Reading a received message. Whatever arrives, the raw bytes are kept as they are; this
module pulls out what it can (decoded headers, text and HTML bodies, attachment
metadata) and never raises: malformed MIME yields less, not an error."""
import email
import logging
from dataclasses import dataclass, field
from email import policy
from email.header import decode_header, make_header
from email.message import Message as EmailMessage

logger = logging.getLogger(__name__)

MAX_HEADERS = 500
MAX_HEADER_CHARS = 16_384
MAX_ATTACHMENTS = 200


@dataclass
class ParsedMessage:
    from_header: str = ""
    to_header: str = ""
    subject: str = ""
    text: str = ""
    html: str = ""
    headers: list = field(default_factory=list)
    attachments: list = field(default_factory=list)


def clean_text(value: str) -> str:
    """Make a string storable anywhere: PostgreSQL refuses NUL and lone surrogates, which
    8-bit headers decoded with surrogateescape are full of."""
    if not value:
        return ""
    return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _header_text(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
        return clean_text(str(value)) if value is not None else ""
    except Exception:
        return _legacy_decode(message, name)


def _legacy_decode(message: EmailMessage, name: str) -> str:
    """For headers the modern parser chokes on: decode RFC 2047 words one by one."""
    raw = message.get_all(name, failobj=[None])[0] if hasattr(message, "get_all") else None
    if raw is None:
        return ""
    try:
        return clean_text(str(make_header(decode_header(str(raw)))))
    except Exception:
        return clean_text(str(raw))


def _part_text(part: EmailMessage) -> str:
    try:
        content = part.get_content()
        if isinstance(content, str):
            return clean_text(content)
    except Exception:
        pass  # unknown charset, broken transfer encoding: decode the bytes ourselves
    try:
        payload = part.get_payload(decode=True) or b""
    except Exception:
        payload = b""
    charset = "utf-8"
    try:
        charset = part.get_content_charset() or "utf-8"
        return clean_text(payload.decode(charset, "replace"))
    except (LookupError, TypeError):
        return clean_text(payload.decode("utf-8", "replace"))


def _attachment(part: EmailMessage) -> dict:
    try:
        size = len(part.get_payload(decode=True) or b"")
    except Exception:
        size = 0
    try:
        filename = part.get_filename()
    except Exception:
        filename = None
    content_id = _header_text(part, "Content-ID").strip().strip("<>") or None
    return {
        "filename": clean_text(filename) if filename else None,
        "content_type": clean_text(part.get_content_type()),
        "size": size,
        "content_id": clean_text(content_id) if content_id else None,
    }


def _is_attachment(part: EmailMessage) -> bool:
    try:
        disposition = (part.get_content_disposition() or "").lower()
        has_name = bool(part.get_filename())
    except Exception:
        disposition, has_name = "", False
    if disposition == "attachment" or has_name:
        return True
    # Inline parts that are not text (an image referenced by Content-ID) count too.
    return part.get_content_maintype() not in ("text", "multipart", "message")


def parse_message(raw: bytes) -> ParsedMessage:
    parsed = ParsedMessage()
    try:
        message = email.message_from_bytes(raw, policy=policy.default)
    except Exception:
        logger.warning("message of %d bytes could not be parsed at all; stored raw only", len(raw))
        return parsed

    parsed.from_header = _header_text(message, "From")
    parsed.to_header = _header_text(message, "To")
    parsed.subject = _header_text(message, "Subject")
    try:
        names = list(message.keys())[:MAX_HEADERS]
    except Exception:
        names = []
    seen: dict[str, int] = {}
    for name in names:
        index = seen.get(name, 0)
        seen[name] = index + 1
        try:
            value = str(message.get_all(name)[index])
        except Exception:
            value = _legacy_decode(message, name)
        parsed.headers.append([clean_text(name), clean_text(value)[:MAX_HEADER_CHARS]])

    try:
        parts = list(message.walk())
    except Exception:
        parts = [message]
    for part in parts:
        try:
            if part.is_multipart():
                continue
            if _is_attachment(part):
                if len(parsed.attachments) < MAX_ATTACHMENTS:
                    parsed.attachments.append(_attachment(part))
                continue
            content_type = part.get_content_type()
            if content_type == "text/plain" and not parsed.text:
                parsed.text = _part_text(part)
            elif content_type == "text/html" and not parsed.html:
                parsed.html = _part_text(part)
        except Exception:
            logger.warning("skipped an unreadable MIME part", exc_info=True)
    return parsed
