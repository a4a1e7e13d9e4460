"""Reading a received message. Whatever arrives, the raw bytes are kept as they are; this
module pulls out what it can (decoded headers, text and HTML bodies, attachment
metadata) and never raises: malformed MIME yields less, not an error.

Parsing is linear in the message's size and capped, so no message can hold a worker for
long: at most MAX_HEADERS header lines are decoded (each once, each cut to
MAX_HEADER_CHARS before decoding), at most MAX_PARTS MIME parts are read, bodies are
kept up to MAX_BODY_BYTES, and reading the parts stops PARSE_SECONDS after the structure
was split. A message that hits a cap is stored whole, with what was parsed before it and
`parsed_fully` false. The compat32 policy is used for the structure: it splits headers
without interpreting them (the default policy's header objects cost seconds on thousands
of repeated headers); values are decoded here.
"""
import email
import logging
import re
import time
from dataclasses import dataclass, field
from email import policy
from email.header import decode_header, make_header
from email.message import Message as EmailMessage
from email.parser import BytesHeaderParser

logger = logging.getLogger(__name__)

MAX_HEADERS = 500
MAX_HEADER_CHARS = 16_384
MAX_ATTACHMENTS = 200
MAX_PARTS = 1000
# The text and HTML bodies kept as parsed fields; the raw bytes always hold all of it.
# Without a cap a 10 MB text body would be stored twice, raw and parsed.
MAX_BODY_BYTES = 1024 * 1024
PARSE_SECONDS = 1.0
# A header section longer than this (folded lines included) is cut before parsing: the
# parsed fields would be cut to MAX_HEADER_CHARS anyway.
MAX_HEADER_SECTION_BYTES = MAX_HEADERS * 1024
BOUNDARY_LINE = re.compile(rb"^--", re.MULTILINE)
# How the parser keeps a byte it could not decode as ASCII: a lone surrogate.
ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


@dataclass
class ParsedMessage:
    from_header: str = ""
    to_header: str = ""
    subject: str = ""
    text: str = ""
    html: str = ""
    headers: list = field(default_factory=list)
    attachments: list = field(default_factory=list)
    parsed_fully: bool = True


def clean_text(value: str) -> str:
    """Make a string storable anywhere: PostgreSQL refuses NUL and lone surrogates, which
    8-bit headers decoded with surrogateescape are full of."""
    if not value:
        return ""
    return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def unescape_8bit(value: str) -> str:
    """A header value as the parser read it from bytes, with its 8-bit bytes decoded: as
    UTF-8 (RFC 6532, which SMTPUTF8 announces, and what most senders write anyway), else
    as Latin-1, which maps every byte to a character and so loses none. The parser keeps
    such bytes as surrogate escapes; left alone they end up as U+FFFD."""
    if not ESCAPED_BYTE.search(value):
        return value
    data = value.encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _raw_header(message: EmailMessage, name: str) -> str | None:
    """The first `name` header as stored, before the compat32 policy turns a value with
    8-bit bytes into a Header object whose text has lost them."""
    name = name.lower()
    return next((value for key, value in message.raw_items() if key.lower() == name), None)


def decode_header_value(raw) -> str:
    """A header value as text: 8-bit bytes decoded, RFC 2047 words decoded, folding
    undone, capped."""
    if raw is None:
        return ""
    text = unescape_8bit(str(raw)[:MAX_HEADER_CHARS])
    try:
        text = str(make_header(decode_header(text)))
    except Exception:
        pass  # a broken encoded word: keep the text as it came
    return clean_text(" ".join(text.split()) if "\n" in text or "\r" in text else text)[:MAX_HEADER_CHARS]


def _part_text(part: EmailMessage, parsed: "ParsedMessage") -> str:
    try:
        payload = part.get_payload(decode=True) or b""
    except Exception:
        payload = b""
    if not isinstance(payload, bytes):
        return ""
    if len(payload) > MAX_BODY_BYTES:
        payload, parsed.parsed_fully = payload[:MAX_BODY_BYTES], False
    try:
        return clean_text(payload.decode(part.get_content_charset() or "utf-8", "replace"))
    except (LookupError, TypeError):
        return clean_text(payload.decode("utf-8", "replace"))


def _filename(part: EmailMessage) -> str | None:
    try:
        filename = part.get_filename()
    except Exception:
        return None
    return decode_header_value(filename) if filename else None


def attachment_description(part: EmailMessage) -> dict:
    try:
        size = len(part.get_payload(decode=True) or b"")
    except Exception:
        size = 0
    filename = _filename(part)
    content_id = decode_header_value(_raw_header(part, "Content-ID")).strip().strip("<>") or None
    return {"filename": filename, "content_type": clean_text(part.get_content_type()), "size": size,
            "content_id": content_id}


def is_attachment(part: EmailMessage) -> bool:
    try:
        disposition = (part.get_content_disposition() or "").lower()
    except Exception:
        disposition = ""
    if disposition == "attachment" or _filename(part):
        return True
    # Inline parts that are not text (an image referenced by Content-ID) count too.
    return part.get_content_maintype() not in ("text", "multipart", "message")


def bounded_bytes(raw: bytes) -> tuple[bytes, bool]:
    """The bytes handed to the parser: the header section cut at MAX_HEADER_SECTION_BYTES
    and the body cut before its MAX_PARTS-th boundary line, so the parser's own work is
    bounded too. Returns them and whether anything was cut."""
    end = raw.find(b"\r\n\r\n")
    end = len(raw) if end < 0 else end
    cut = False
    if end > MAX_HEADER_SECTION_BYTES:
        raw, cut = raw[:MAX_HEADER_SECTION_BYTES] + b"\r\n\r\n", True
    elif raw.count(b"\n--", end) > MAX_PARTS * 2:  # a byte search; most mail is far below the cap
        for count, boundary in enumerate(BOUNDARY_LINE.finditer(raw, end)):
            if count >= MAX_PARTS * 2:  # an opening and a closing line per part, at most
                raw, cut = raw[:boundary.start()], True
                break
    return raw, cut


def parse_message(raw: bytes) -> ParsedMessage:
    parsed = ParsedMessage()
    bounded, cut = bounded_bytes(raw)
    parsed.parsed_fully = not cut
    try:
        message = email.message_from_bytes(bounded, policy=policy.compat32)
    except Exception:  # e.g. MIME nested deeper than the parser's recursion allows
        logger.warning("the MIME structure of a %d-byte message could not be read; headers only", len(raw))
        parsed.parsed_fully = False
        try:
            message = BytesHeaderParser(policy=policy.compat32).parsebytes(bounded)
        except Exception:
            return parsed

    # The clock starts once the structure is split: that step is linear in the bytes
    # (bounded above), and on slow cores it alone can take a second for a large message,
    # which would leave no time to list a large attachment's part.
    deadline = time.monotonic() + PARSE_SECONDS
    items = list(message.raw_items())
    if len(items) > MAX_HEADERS:
        items, parsed.parsed_fully = items[:MAX_HEADERS], False
    for name, value in items:
        parsed.headers.append([clean_text(unescape_8bit(name)), decode_header_value(value)])
    parsed.from_header = decode_header_value(_raw_header(message, "From"))
    parsed.to_header = decode_header_value(_raw_header(message, "To"))
    parsed.subject = decode_header_value(_raw_header(message, "Subject"))

    try:
        parts = message.walk()
        for index, part in enumerate(parts):
            if index >= MAX_PARTS or time.monotonic() > deadline:
                parsed.parsed_fully = False
                break
            _read_part(part, parsed)
    except Exception:
        logger.warning("stopped reading the MIME structure of a %d-byte message", len(raw), exc_info=True)
        parsed.parsed_fully = False
    if not parsed.parsed_fully:
        logger.info("a %d-byte message hit a parsing cap; stored whole, parsed in part", len(raw))
    return parsed


def _read_part(part: EmailMessage, parsed: ParsedMessage) -> None:
    try:
        if part.is_multipart():
            return
        if is_attachment(part):
            if len(parsed.attachments) < MAX_ATTACHMENTS:
                parsed.attachments.append(attachment_description(part))
            return
        content_type = part.get_content_type()
        if content_type == "text/plain" and not parsed.text:
            parsed.text = _part_text(part, parsed)
        elif content_type == "text/html" and not parsed.html:
            parsed.html = _part_text(part, parsed)
    except Exception:
        logger.warning("skipped an unreadable MIME part", exc_info=True)
