"""The shape of mail: a message parsed (never raising, capped in size and time), its header
look-up, its place in a conversation (Lineage), and an HTML body's readable text."""
import email
import html
import logging
import re
import time
from dataclasses import dataclass, field
from email import policy
from email.header import decode_header, make_header
from email.message import Message as EmailMessage
from email.parser import BytesHeaderParser

logger = logging.getLogger(__name__)

# Every character str.splitlines() breaks at, and NUL: none may go into a header line.
LINE_BREAKERS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00"
_BREAKS = re.compile(f"[{re.escape(LINE_BREAKERS)}]")
# The same rule as a JSON-schema pattern, for the API's schema.
ONE_LINE_PATTERN = "^[^" + "".join(f"\\u{ord(character):04x}" for character in LINE_BREAKERS) + "]*$"


# What a value refused for breaking a line is told, at every door.
NOT_ONE_LINE = "must be one line: no CR, LF or other line-breaking character."


def breaks_line(value: str) -> bool:
    return bool(_BREAKS.search(value))

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
    """A header value read from bytes, its 8-bit bytes decoded as UTF-8, else Latin-1 (which
    loses none)."""
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


def _part_text(part: EmailMessage, parsed: "ParsedMessage | None", limit: int | None = MAX_BODY_BYTES) -> str:
    """A text part decoded; cut at `limit` bytes (noted in `parsed`) unless None."""
    try:
        payload = part.get_payload(decode=True) or b""
    except Exception:
        payload = b""
    if not isinstance(payload, bytes):
        return ""
    if limit is not None and len(payload) > limit:
        payload, parsed.parsed_fully = payload[:limit], False
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
    """The bytes handed to the parser, header section and parts cut to the caps, and whether
    anything was cut."""
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

# The clock starts once the structure is split (linear in the bounded bytes).
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


def whole_html(raw: bytes) -> str:
    """The message's first HTML body uncut (parse_message keeps MAX_BODY_BYTES of it): what
    a check of the HTML reads. Linear in the message."""
    bounded, _ = bounded_bytes(raw)
    try:
        message = email.message_from_bytes(bounded, policy=policy.compat32)
        for index, part in enumerate(message.walk()):
            if index >= MAX_PARTS:
                break
            if not part.is_multipart() and part.get_content_type() == "text/html" and not is_attachment(part):
                return _part_text(part, None, limit=None)
    except Exception:
        logger.warning("could not read the HTML of a %d-byte message", len(raw), exc_info=True)
    return ""


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


# --- text -----------------------------------------------------------------------------------
# Characters of an HTML body looked at: a 10 MB body is not read through for its text.
HTML_SCAN_MAX = 200_000


HIDDEN_OPEN = re.compile(r"<(script|style|head)\b", re.IGNORECASE)
# A tag ends at its ">", or where the next one starts: "<<<<" is read once, not once per "<".
TAG = re.compile(r"<[^<>]*>?")


def text_of_html(html_body: str) -> str:
    """Readable text of an HTML-only mail in one pass: tags, scripts and styles dropped,
    entities decoded."""
    body = html_body[:HTML_SCAN_MAX]
    lowered = body.lower()
    visible = []
    position = 0
    while match := HIDDEN_OPEN.search(body, position):
        visible.append(body[position:match.start()])
        close = lowered.find(f"</{match.group(1).lower()}", match.end())
        if close < 0:
            position = len(body)
            break
        end = body.find(">", close)
        position = len(body) if end < 0 else end + 1
    visible.append(body[position:])
    return html.unescape(TAG.sub(" ", " ".join(visible)))


# --- headers and lineage ------------------------------------------------------------------
# A Message-ID as written: <left@right>, cut to what a key holds.
ID = re.compile(r"<([^<>\s]+)>")
KEY_CHARS = 250
# A References header may list thousands of ids; the thread's root (the first) and the
# nearest parents (the last) are what link a message to its thread.
MAX_PARENTS = 50
# "Re:", "Fwd:" and their kin, as mail clients prefix a subject (repeated, any case, with
# a count like "Re[2]:").
REPLY_PREFIX = re.compile(r"^\s*(?:re|aw|sv|antw)(?:\[\d+\])?\s*:\s*", re.IGNORECASE)
FORWARD_PREFIX = re.compile(r"^\s*(?:fwd?|wg|tr)(?:\[\d+\])?\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Lineage:
    """Where a message stands in its conversation: its own Message-ID and the ids of the
    messages it answers (References, then In-Reply-To)."""

    message_id: str = ""
    in_reply_to: str = ""
    references: tuple[str, ...] = field(default_factory=tuple)

    @property
    def parents(self) -> list[str]:
        ids = list(dict.fromkeys([*self.references, self.in_reply_to] if self.in_reply_to else self.references))
        ids = [key for key in ids if key != self.message_id]
        return ids if len(ids) <= MAX_PARENTS else [ids[0], *ids[-(MAX_PARENTS - 1):]]

    @property
    def keys(self) -> list[str]:
        return [self.message_id, *self.parents] if self.message_id else self.parents


def ids_in(value: str) -> list[str]:
    """The Message-IDs in a header's value, without their angle brackets."""
    found = ID.findall(value or "")
    if not found and value and len(value.split()) == 1:
        found = [value.strip()]  # an id written without its brackets
    return [key[:KEY_CHARS] for key in found]


def header(headers: list, name: str) -> str:
    """The first `name` header of a parsed message ([[name, value], …]), or ""."""
    name = name.lower()
    return next((value for key, value in headers if key.lower() == name), "")


def lineage_of(headers: list) -> Lineage:
    own = ids_in(header(headers, "Message-ID"))
    in_reply_to = ids_in(header(headers, "In-Reply-To"))
    return Lineage(message_id=own[0] if own else "", in_reply_to=in_reply_to[0] if in_reply_to else "",
                   references=tuple(ids_in(header(headers, "References"))))


def topic(subject: str) -> str:
    """A subject without its reply and forward prefixes: what a thread is called."""
    while True:
        shorter = FORWARD_PREFIX.sub("", REPLY_PREFIX.sub("", subject, count=1), count=1)
        if shorter == subject:
            return subject.strip()
        subject = shorter
