"""What a client usually wants out of a mail (SPEC §9): the one-time code, and the links.

Codes are 4–8 digits (also written 123-456 or 123 456), or 6–12 letters and digits with
at least one digit, found in the subject and the text near a word that announces a code
(code, OTP, PIN, verification, token, and their kin in a few languages). The nearer the
word, the likelier the code; a number that is part of a phone number, a date, a year, a
price or a URL is not a code. Links come from the HTML's anchors and the text's URLs, in
order, without duplicates.

Pure functions over strings: linear in the text's size, no network, no database."""
import html
import re
from html.parser import HTMLParser

# Words that announce a code, matched anywhere in a word (so "Bestätigungscode" and
# "passcode" count) and ignoring case.
KEYWORDS = re.compile(
    r"code|otp|\bpin\b|passcode|verif|token|one[- ]time|2fa|two[- ]factor|two[- ]step|2-step|"
    r"authenticat|security|sign[- ]?in|log[- ]?in|confirm|"
    r"código|codice|kod|код|パスコード|認証|验证码|確認",
    re.IGNORECASE,
)
# How far (in characters) a keyword may be from a code for it to count.
NEAR = 80
URL = re.compile(r"https?://[^\s<>\"'()\[\]{}]+", re.IGNORECASE)
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
DIGITS = re.compile(r"(?<![\w+$€£¥/.:,-])(\d{3}[- ]\d{3}|\d{4,8})(?![\w/%:]|[.,-]\d)")
ALNUM = re.compile(r"(?<![\w/.-])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])([A-Za-z0-9]{6,12})(?![\w/.-])")
# Things made of digits that are not codes.
DATE = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[./-]\d{1,2}[./-]\d{2,4}\b")
PHONE = re.compile(r"(?:\+|\btel\b|\bphone\b|\bcall\b)[\s:.]*[\d(][\d\s().-]{6,}\d|\(\d{2,4}\)\s?\d[\d\s.-]{4,}\d"
                   r"|\b\d{3}[-. ]\d{3}[-. ]\d{4}\b", re.IGNORECASE)
YEAR = re.compile(r"^(19|20)\d\d$")
WORDY = re.compile(r"^[A-Za-z]+\d?$|^\d?[A-Za-z]+$")  # "Welcome1" is a word, not a code
MAX_SCAN = 200_000  # characters of subject + text looked at


def _masked(text: str) -> str:
    """The text with URLs, addresses, dates and phone numbers blanked out (same length,
    so positions stay true): what is left may hold codes."""
    for pattern in (URL, EMAIL, DATE, PHONE):
        text = pattern.sub(lambda match: " " * len(match.group(0)), text)
    return text


def find_codes(subject: str, text: str) -> list[str]:
    """One-time codes, most likely first."""
    source = f"{subject}\n{text}"[:MAX_SCAN]
    masked = _masked(source)
    keywords = [match.start() for match in KEYWORDS.finditer(masked)]
    if not keywords:
        return []
    scored: dict[str, tuple[int, int, int]] = {}
    for pattern, kind in ((DIGITS, 0), (ALNUM, 1)):
        for match in pattern.finditer(masked):
            raw = match.group(1)
            code = raw.replace("-", "").replace(" ", "")
            if kind == 0 and YEAR.match(code):
                continue
            if kind == 1 and (WORDY.match(code) or code.isdigit()):
                continue
            distance = min(abs(position - match.start()) for position in keywords)
            if distance > NEAR:
                continue
            rank = (distance, kind, match.start())
            if code not in scored or rank < scored[code]:
                scored[code] = rank
    return sorted(scored, key=scored.get)


class _Anchors(HTMLParser):
    """The <a href> of an HTML body, with their text, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self._open: list[str] | None = None
        self._href = ""

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._open = []

    def handle_data(self, data):
        if self._open is not None:
            self._open.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._open is not None:
            self.links.append((self._href, " ".join("".join(self._open).split())))
            self._open = None


def find_links(text: str, html_body: str) -> list[dict]:
    """`[{"url", "text"}]`: the HTML's http(s) anchors, then the text's URLs, each URL once."""
    found: list[tuple[str, str]] = []
    if html_body:
        parser = _Anchors()
        try:
            parser.feed(html_body[:MAX_SCAN])
            parser.close()
        except Exception:  # malformed markup: keep what was read
            pass
        found += parser.links
    found += [(match.group(0).rstrip(".,;:!?"), "") for match in URL.finditer(text[:MAX_SCAN])]
    links, seen = [], set()
    for url, label in found:
        url = html.unescape(url.strip())
        if not url.lower().startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        links.append({"url": url, "text": label or url})
    return links
