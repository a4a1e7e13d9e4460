"""One-time tokens as self-proving links, `base64url(secret || HMAC)` under the first of
RELAY_TOKEN_SIGNING_KEYS (any verifies); a recovery link is signed with its code."""
import base64
import binascii
import hashlib
import hmac
import secrets

from django.conf import settings

from accounts.errors import InvalidRequest
from accounts.identity import secret_digest
from accounts.models import TokenAction

SECRET_BYTES = 32
MAC_BYTES = 32
CODE_DIGITS = 5
# Wrong codes a token survives; the fifth burns it (docs/api.md).
MAX_WRONG_CODES = 5

# The path each action's link opens, which is also signed: an activation link cannot be
# replayed as a recovery link.
PATHS = {TokenAction.ACTIVATION: "/activate", TokenAction.KEY_RECOVERY: "/recover",
         TokenAction.SIGN_IN: "/inbox/sign-in"}


class BadSignature(InvalidRequest):
    default_message = "This link is not valid: it was changed or cut short."


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def new_code() -> str:
    return f"{secrets.randbelow(10 ** CODE_DIGITS):0{CODE_DIGITS}d}"


def secret_hash(secret: bytes) -> str:
    return secret_digest(secret)


def code_hash(stored_secret_hash: str, code: str) -> str:
    """The code bound to its token's secret: the same code on two tokens hashes apart."""
    return secret_digest(f"{stored_secret_hash}:{code}")


def _signed_data(action: str, secret: bytes, code: str | None) -> bytes:
    data = PATHS[action].encode() + secret
    if action == TokenAction.KEY_RECOVERY:
        data += (code or "").encode()
    return data


def _mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def sign(action: str, secret: bytes, code: str | None = None) -> str:
    mac = _mac(settings.RELAY_TOKEN_SIGNING_KEYS[0], _signed_data(action, secret, code))
    return base64.urlsafe_b64encode(secret + mac).rstrip(b"=").decode()


def decode(link_token: str) -> tuple[bytes, bytes]:
    """The secret and the MAC a link carries; BadSignature if it is not even shaped
    like one. No database is touched."""
    if not isinstance(link_token, str) or len(link_token) != 86:
        raise BadSignature()
    try:
        raw = base64.urlsafe_b64decode(link_token + "==")
    except (binascii.Error, ValueError):
        raise BadSignature() from None
    if len(raw) != SECRET_BYTES + MAC_BYTES:
        raise BadSignature()
    return raw[:SECRET_BYTES], raw[SECRET_BYTES:]


def signature_valid(action: str, secret: bytes, mac: bytes, code: str | None = None) -> bool:
    data = _signed_data(action, secret, code)
    # Every key is tried (no early exit), so the time taken says nothing about which matched.
    matches = [hmac.compare_digest(_mac(key, data), mac) for key in settings.RELAY_TOKEN_SIGNING_KEYS]
    return any(matches)


def verify(action: str, link_token: str, code: str | None = None) -> bytes:
    """The secret of a link that this Relay signed for `action` (and, for recovery, with
    `code`). Raises BadSignature otherwise, before any database lookup."""
    secret, mac = decode(link_token)
    if not signature_valid(action, secret, mac, code):
        raise BadSignature()
    return secret
