"""A stored message's attachments, read back from its raw bytes by ingest's own walk, and
served only as downloads a browser cannot run (docs/api.md, "Attachments")."""
import codecs
import email
import re
import unicodedata
from email import policy

from mailboxes.mail_format import MAX_ATTACHMENTS, MAX_PARTS, attachment_description, bounded_bytes, is_attachment

# Types a browser shows without running anything, served as declared; any other is octet-stream.
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
# What a charset name may be (RFC 2978's names, as IANA lists them).
CHARSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,39}")


def attachment_of(raw: bytes, number: int) -> tuple[dict, bytes] | None:
    """Attachment `number` (from 1) of a message's raw bytes: its description and decoded
    bytes, or None."""
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


def safe_charset(charset: str | None) -> str:
    """The charset named for a text attachment: the sender's if Python knows it, else utf-8."""
    if not charset or not CHARSET_NAME.fullmatch(charset):
        return "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset.lower()


def served_content_type(declared: str, charset: str | None = None) -> str:
    """The Content-Type an attachment is served with: its own when inert, else opaque."""
    declared = (declared or "").lower()
    if declared not in INERT_TYPES:
        return OPAQUE_TYPE
    if declared.startswith("text/"):
        return f"{declared}; charset={safe_charset(charset)}"
    return declared


def without_format_characters(text: str | None) -> str | None:
    """`text` without Unicode control and format characters (Cc, Cf): how a sender's
    filename is shown, so that no override or zero-width mark disguises it."""
    if text is None:
        return None
    return "".join(char for char in text if unicodedata.category(char) not in ("Cc", "Cf"))


def safe_filename(filename: str | None, number: int) -> str:
    """A filename for Content-Disposition: the declared name's last segment without control,
    format (a right-to-left override), quote or separator characters; `attachment-N` if empty."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = without_format_characters(name)
    name = UNSAFE_IN_FILENAME.sub("_", name).strip(" .")[:MAX_FILENAME_CHARS]
    return name or f"attachment-{number}"
