"""A stored message's attachments, read back from its raw bytes (docs/api.md,
"Attachments").

Ingest stores each attachment's description only (relay.inbound.parsing); the bytes stay
in the raw message, stored whole. An attachment's id is its number in the order ingest
listed them, found again here by the same walk over the same bytes.

Serving them is where a hostile mail could strike: an HTML or SVG attachment opened on
Relay's origin would run its script with the reader's session. So an attachment is
always a download, in a sandbox, never sniffed, and typed as what it says only when that
type cannot run in a browser."""
import email
import re
from email import policy

from relay.inbound.parsing import MAX_ATTACHMENTS, MAX_PARTS, attachment_description, bounded_bytes, is_attachment

# Types a browser shows without running anything: served as declared. Anything else
# (text/html, image/svg+xml, application/xhtml+xml, text/xml, JavaScript, …) is served
# as application/octet-stream.
INERT_TYPES = frozenset({
    "text/plain", "text/csv", "text/calendar",
    "image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/avif",
    "audio/mpeg", "audio/ogg", "audio/wav", "video/mp4", "video/webm",
    "application/pdf", "application/zip", "application/gzip", "application/json",
    "application/octet-stream",
})
OPAQUE_TYPE = "application/octet-stream"
# Served with every attachment: no script, no plugin, no form, no same-origin access,
# even if a browser were made to render it.
SAFETY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "sandbox; default-src 'none'",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# What a filename keeps: no path, no control character, no quote, not too long.
UNSAFE_IN_FILENAME = re.compile(r'[\x00-\x1f\x7f"\\/:*?<>|]+')
MAX_FILENAME_CHARS = 150


def attachment_of(raw: bytes, number: int) -> tuple[dict, bytes] | None:
    """Attachment `number` (1, 2, … in the order ingest listed them) of a message's raw
    bytes: its description (with its declared charset) and its decoded bytes, or None
    if it has no such one."""
    bounded, _ = bounded_bytes(raw)
    try:
        message = email.message_from_bytes(bounded, policy=policy.compat32)
    except Exception:  # the MIME structure could not be read: ingest listed none either
        return None
    seen = 0
    for index, part in enumerate(message.walk()):
        if index >= MAX_PARTS or seen >= MAX_ATTACHMENTS:
            return None
        try:
            if part.is_multipart() or not is_attachment(part):
                continue
        except Exception:  # ingest skipped an unreadable part the same way
            continue
        seen += 1
        if seen == number:
            try:
                payload = part.get_payload(decode=True) or b""
            except Exception:
                payload = b""
            try:
                charset = part.get_content_charset()
            except Exception:
                charset = None
            return {**attachment_description(part), "charset": charset}, payload
    return None


def served_content_type(declared: str, charset: str | None = None) -> str:
    """The Content-Type an attachment is served with: its own when inert, else opaque."""
    declared = (declared or "").lower()
    if declared not in INERT_TYPES:
        return OPAQUE_TYPE
    if declared.startswith("text/"):
        return f"{declared}; charset={charset or 'utf-8'}"
    return declared


def safe_filename(filename: str | None, number: int) -> str:
    """A filename for Content-Disposition: the last path segment of the declared name,
    without control characters, quotes or separators; `attachment-N` when none is left."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = UNSAFE_IN_FILENAME.sub("_", name).strip(" .")[:MAX_FILENAME_CHARS]
    return name or f"attachment-{number}"
