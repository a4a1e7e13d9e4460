"""DKIM signatures on mail Relay sends, relaxed/relaxed with the From domain's key or
RELAY_DKIM_PRIVATE_KEY_FILE's, made once when the mail is queued."""
import logging
from email.utils import parseaddr

import dkim

from domains.keys import KeyUnreadable
from domains.services import signing_key
from relay import dkim_linear  # noqa: F401 (dkimpy's body canonicalization made linear)

logger = logging.getLogger(__name__)

SIGNED_HEADERS = [b"from", b"to", b"cc", b"subject", b"date", b"message-id", b"reply-to", b"mime-version",
                  b"content-type", b"content-transfer-encoding", b"in-reply-to", b"references"]


def dkim_signed(message: bytes, from_email: str) -> bytes:
    """`message` with a DKIM-Signature when its From domain has a key (an unreadable key is
    logged, and the message goes unsigned)."""
    domain = parseaddr(from_email)[1].rpartition("@")[2].lower()
    try:
        key = signing_key(domain) if domain else None
    except KeyUnreadable as exc:
        logger.error("mail from %s goes unsigned: %s", domain, exc)
        return message
    if key is None:
        return message
    selector, private_pem = key
    present = {line.split(b":", 1)[0].strip().lower() for line in message.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
               if b":" in line and not line[:1].isspace()}
    signature = dkim.sign(message, selector.encode(), domain.encode(), private_pem,
                          include_headers=[name for name in SIGNED_HEADERS if name in present],
                          canonicalize=(b"relaxed", b"relaxed"))
    return signature + message
