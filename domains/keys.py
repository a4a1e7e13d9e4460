"""A domain's DKIM key pair: RSA 2048, made when the domain is added. The private key is
kept encrypted (Fernet, with a key derived from DJANGO_SECRET_KEY; the keys in
DJANGO_SECRET_KEY_FALLBACKS still decrypt, so the secret key can be rotated)."""
import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

KEY_BITS = 2048


def new_key_pair() -> tuple[bytes, str]:
    """A fresh RSA key: its private half as PEM (PKCS#1, as DKIM signers read it) and its
    public half as a DKIM record's p= value."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption())
    public_der = key.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    return private_pem, base64.b64encode(public_der).decode()


def _box() -> MultiFernet:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"relay dkim key:" + secret.encode()).digest()))
                        for secret in secrets])


def seal(private_pem: bytes) -> str:
    return _box().encrypt(private_pem).decode()


class KeyUnreadable(Exception):
    """The key was encrypted under a secret key Relay no longer has."""


def unseal(sealed: str) -> bytes:
    try:
        return _box().decrypt(sealed.encode())
    except InvalidToken:
        raise KeyUnreadable("the domain's DKIM key was encrypted under another DJANGO_SECRET_KEY; add that key "
                            "to DJANGO_SECRET_KEY_FALLBACKS") from None
