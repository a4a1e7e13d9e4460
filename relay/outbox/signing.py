"""DKIM signatures on the mail Relay sends (docs/api.md, "Domains"): from a mailbox on a
domain of one's own, with that domain's key; from RELAY_DOMAINS, with the key of
RELAY_DKIM_PRIVATE_KEY_FILE when it is set. relaxed/relaxed, over the headers a
receiver judges a mail by, made once when the mail is queued (every attempt sends the
same signed bytes)."""
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
    """`message` with a DKIM-Signature on top when its From domain has a key; as it is
    otherwise, and when the key cannot be read (the error is logged: an operator's to
    fix, not the sender's)."""
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
