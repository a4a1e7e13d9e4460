"""dkimpy's relaxed body canonicalization in linear time (its regex tried every position of a
whitespace run); imported by every module that calls dkimpy, before any check or signature."""
import re

import dkim.canonicalization

_TRAILING_WHITESPACE = re.compile(rb"(?<![\t ])[\t ]+\r\n")


def strip_trailing_whitespace(content: bytes) -> bytes:
    return _TRAILING_WHITESPACE.sub(b"\r\n", content)


dkim.canonicalization.strip_trailing_whitespace = strip_trailing_whitespace
