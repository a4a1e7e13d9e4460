"""What may go into a header line of mail Relay sends, for every door: no character any
line breaker splits on (SECURITY.md, "Mail out"), and strict addresses."""
import re

from mailboxes.errors import InvalidRequest

# Every character str.splitlines() breaks at, and NUL.
LINE_BREAKERS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00"
_BREAKS = re.compile(f"[{re.escape(LINE_BREAKERS)}]")
# The same rule as a JSON-schema pattern, for the API's schema.
ONE_LINE_PATTERN = "^[^" + "".join(f"\\u{ord(character):04x}" for character in LINE_BREAKERS) + "]*$"

# A local part of atext and dots, a domain of letters, digits and hyphens: nothing quoted.
ADDRESS_PATTERN = r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
_ADDRESS = re.compile(ADDRESS_PATTERN)


def breaks_line(value: str) -> bool:
    return bool(_BREAKS.search(value))


def one_line(value: str, field: str) -> str:
    """`value`, or InvalidRequest naming `field` when it holds a line breaker."""
    if breaks_line(value):
        raise InvalidRequest(f"{field} must be one line: no CR, LF or other line-breaking character "
                             "(vertical tab, form feed, U+001C-U+001E, U+0085, U+2028, U+2029) and no NUL.",
                             field=field)
    return value


def strict_address(value: str) -> bool:
    """Whether `value` is an address Relay writes into a header as it is."""
    return len(value) <= 320 and bool(_ADDRESS.match(value))


def address(value: str, field: str) -> str:
    if not strict_address(value):
        raise InvalidRequest(f"{field} must be an email address (local@domain, no quoting, no control "
                             "characters).", field=field)
    return value
