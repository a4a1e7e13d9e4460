"""dkimpy's relaxed body canonicalization in linear time (its regex tried every position of a
whitespace run): `install()` puts it in dkimpy's place, which relay's AppConfig.ready does in
every process before any check or signature."""
import re

import dkim.canonicalization

_TRAILING_WHITESPACE = re.compile(rb"(?<![\t ])[\t ]+\r\n")


def strip_trailing_whitespace(content: bytes) -> bytes:
    return _TRAILING_WHITESPACE.sub(b"\r\n", content)


def install() -> None:
    dkim.canonicalization.strip_trailing_whitespace = strip_trailing_whitespace
