"""A whole number a client sent as text (a query parameter, a form field, a header), parsed
one way at every door: ASCII digits only, within bounds, else InvalidRequest, which each door
answers as its 400 (the API's error table, the web inbox's problem page).

`str.isdigit()` is not the test: it is true of "²" and of other digits `int()` refuses, and
`int()` itself takes "٣", " 7", "+7" and "1_000"."""
import re

from accounts.errors import InvalidRequest

# What fits a PostgreSQL bigint, the widest id or count Relay stores.
BIGINT_MAX = 2 ** 63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def whole_number(text: str | None, *, field: str, low: int = 0, high: int = BIGINT_MAX,
                 default: int | None = None) -> int | None:
    """`text` as an int from `low` to `high`; `default` when it is absent or empty."""
    if text is None or text == "":
        return default
    if not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        raise InvalidRequest(f"{field} must be a whole number from {low} to {high}.", field=field)
    return int(text)


def whole_number_or_none(text: str | None) -> int | None:
    """`text` as an int when it is one by the same rule, else None: for a value whose sender
    is not told (an SMTP client's SIZE=, a mail server's Retry-After)."""
    return int(text) if text and _DIGITS.fullmatch(text) else None
