"""Taking a message into Relay's store, the one way for SMTP, the mail-server reader and
sent copies: parsed, codes and links found, verdict, stored, words owed.

The codes and links (docs/api.md, "Codes and links") are found by pure functions, linear
in the text whatever it holds, run once when a message is stored."""
import bisect
import html
import logging
import re
import threading
import time
import unicodedata

from celery import current_app
from django.db import connection

from mailboxes.mail_format import header, lineage_of, parse_message, text_of_html
from mailboxes.messages import Recipient, message_store
from mailboxes.models import Direction, MessageContent
from core import task_names
from core.storage import keeps_search_words
from relay.verdicts import authenticate, spf_of_mail_server

logger = logging.getLogger(__name__)


def message_ingest(*, raw: bytes, mail_from: str, recipients: list[Recipient], server_id: str = "",
                    authentication: dict | None = None, direction: str = Direction.IN,
                    joining: int | None = None, rcpt_to: list[str] = ()) -> list[int]:
    """Parse `raw` and store it for each mailbox that still takes it (message_store's
    errors). `authentication`: SMTP's verdict; without it DKIM and DMARC are checked here.
    `rcpt_to`: a submission's envelope recipients, kept with what a sandbox caught."""
    parsed = parse_message(raw)
    if authentication is None:
        authentication = authenticate(raw, ip=None, mail_from=mail_from, helo="",
                                      spf_result=spf_of_mail_server(parsed.headers, mail_from))
    content = MessageContent(raw=raw, text=parsed.text, html=parsed.html, headers=parsed.headers,
                             authentication=authentication,
                             attachments=parsed.attachments, parsed_fully=parsed.parsed_fully,
                             codes=find_codes(parsed.subject, parsed.text or text_of_html(parsed.html)),
                             links=find_links(parsed.text, parsed.html))
    stored = message_store(content=content, envelope_from=mail_from, from_header=parsed.from_header,
                           to_header=parsed.to_header, cc_header=header(parsed.headers, "Cc"), subject=parsed.subject,
                           recipients=recipients, server_id=server_id, lineage=lineage_of(parsed.headers),
                           direction=direction, joining=joining, rcpt_to=rcpt_to)
    if stored:
        words_index_request()
    return stored


# Sent by name: relay/tasks.py imports the flows (this one among them), not the reverse.
WORDS_TASK = task_names.INDEX_OWED_WORDS
# A worker is asked to write owed words at most this often per process, and that long
# after the first message that owes them: one task for every message a second brings.
WORDS_DELAY_SECONDS = 1.0
_words_lock = threading.Lock()
_words_next_publish = 0.0


def words_index_request() -> None:
    """Ask a worker to write the words of the messages just stored, at most once per
    WORDS_DELAY_SECONDS; what a lost task leaves is beat's or the next search's."""
    global _words_next_publish
    if not keeps_search_words():
        return
    with _words_lock:
        now = time.monotonic()
        if now < _words_next_publish:
            return
        _words_next_publish = now + WORDS_DELAY_SECONDS
    # Published from a thread of its own: the message's 250 never waits on the broker.
    threading.Thread(target=_ask_for_words, name="smtp-words", daemon=True).start()


def _ask_for_words() -> None:
    try:
        current_app.signature(WORDS_TASK).apply_async(countdown=WORDS_DELAY_SECONDS)
    except Exception:
        logger.warning("could not queue the writing of owed search words; beat's backstop will", exc_info=True)
    finally:
        connection.close()  # this thread's own, if it opened one (a task run eagerly, in tests)


# Words that announce a code, matched anywhere in a word, any case. Patterns open with a
# look-ahead at their first characters, so a position that cannot start one is passed at once.
KEYWORDS = re.compile(
    r"(?=[cotpvs2alkmxкκرקकรكک코인확コパ認验驗確校动])"
    r"(?:code|otp|\bpin\b|passcode|verif|vérif|token|one[- ]time|2fa|two[- ]factor|two[- ]step|2-step|"
    r"authenticat|security|sign[- ]?in|log[- ]?in|confirm|"
    # Spanish, Portuguese, Italian, Romanian; Polish, Turkish, Swedish, Danish, Indonesian,
    # Malay; Czech, Slovak, Hungarian; Finnish; Vietnamese.
    r"código|codice|\bcod|kod|kód|koodi|\bmã\b|xác minh|xác thực|"
    # Russian, Ukrainian; Greek; Arabic, Persian; Hebrew; Hindi; Thai.
    r"код|κωδικ|رمز|كود|کد|קוד|कोड|รหัส|"
    # Korean; Japanese; Chinese (simplified and traditional).
    r"인증|코드|확인|コード|パスコード|認証|验证|驗證|確認|校验码|动态码)",
    re.IGNORECASE,
)
# Every KEYWORDS match contains one of these, lower-cased: a text with none of them has
# no keyword, and is told so by a substring search alone.
KEYWORD_STEMS = ("code", "otp", "pin", "verif", "vérif", "token", "one", "2fa", "two", "2-step", "authenticat",
                 "security", "sign", "log", "confirm", "código", "codice", "cod", "kod", "kód", "koodi", "mã", "xác",
                 "код", "κωδικ", "رمز", "كود", "کد", "קוד", "कोड", "รหัส", "인증", "코드", "확인", "コード",
                 "パスコード", "認証", "验证", "驗證", "確認", "校验码", "动态码")
# The stems an ASCII text can hold: most mail's text is ASCII, and each stem costs a pass.
ASCII_KEYWORD_STEMS = tuple(stem for stem in KEYWORD_STEMS if stem.isascii())
# How far (in characters) a keyword may be from a code for it to count.
NEAR = 80
URL = re.compile(r"https?://[^\s<>\"'()\[\]{}]+", re.IGNORECASE)
# An address starts only where a run of its characters starts, each part bounded.
EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}")
# A letter of a script written without spaces (Thai, Japanese, Chinese, Korean) may touch a
# code ("验证码是482913"): only other word characters glue one to a word.
GLUING = r"[^\W\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
DIGITS = re.compile(rf"(?<!{GLUING})(?<![+$€£¥/.:,-])(\d{{3}}[- ]\d{{3}}|\d{{4,8}})(?!{GLUING}|[/%:]|[.,-]\d)")
ALNUM = re.compile(r"(?<![\w/.-])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])([A-Za-z0-9]{6,12})(?![\w/.-])")
# Things made of digits that are not codes.
DATE = re.compile(r"(?=\d)(?:\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[./-]\d{1,2}[./-]\d{2,4}\b)")
PHONE = re.compile(r"(?=[+tpc(\d])(?:(?:\+|\btel\b|\bphone\b|\bcall\b)[\s:.]*[\d(][\d\s().-]{6,}\d|\(\d{2,4}\)\s?\d[\d\s.-]{4,}\d"
                   r"|\b\d{3}[-. ]\d{3}[-. ]\d{4}\b)", re.IGNORECASE)
YEAR = re.compile(r"^(19|20)\d\d$")
WORDY = re.compile(r"^[A-Za-z]+\d?$|^\d?[A-Za-z]+$")  # "Welcome1" is a word, not a code
MAX_SCAN = 200_000  # characters of subject + text looked at


def ascii_digits(code: str) -> str:
    """A code as typed back: Arabic-Indic, fullwidth and other decimal digits as 0-9."""
    return "".join(str(unicodedata.decimal(char)) if char.isdecimal() else char for char in code)


def _masked(text: str) -> str:
    """The text with URLs, addresses, dates and phone numbers blanked out (same length,
    so positions stay true): what is left may hold codes."""
    for pattern in (URL, EMAIL, DATE, PHONE):
        text = pattern.sub(lambda match: " " * len(match.group(0)), text)
    return text


def _distance_to_nearest(positions: list[int], at: int) -> int:
    """How far `at` is from the nearest of `positions` (sorted): a binary search, so a text
    dense with keywords and numbers costs n log n, not n × n."""
    index = bisect.bisect_left(positions, at)
    neighbours = positions[max(0, index - 1):index + 1]
    return min(abs(position - at) for position in neighbours)


def find_codes(subject: str, text: str) -> list[str]:
    """One-time codes, most likely first."""
    source = f"{subject}\n{text}"[:MAX_SCAN]
    lowered = source.lower()
    stems = ASCII_KEYWORD_STEMS if lowered.isascii() else KEYWORD_STEMS
    if not any(word in lowered for word in stems):
        return []  # most mail: no word announces a code (a substring test, far cheaper than KEYWORDS)
    masked = _masked(source)
    keywords = [match.start() for match in KEYWORDS.finditer(masked)]
    if not keywords:
        return []
    scored: dict[str, tuple[int, int, int]] = {}
    for pattern, kind in ((DIGITS, 0), (ALNUM, 1)):
        for match in pattern.finditer(masked):
            raw = match.group(1)
            code = ascii_digits(raw.replace("-", "").replace(" ", ""))
            if kind == 0 and YEAR.match(code):
                continue
            if kind == 1 and (WORDY.match(code) or code.isdigit()):
                continue
            distance = _distance_to_nearest(keywords, match.start())
            if distance > NEAR:
                continue
            rank = (distance, kind, match.start())
            if code not in scored or rank < scored[code]:
                scored[code] = rank
    return sorted(scored, key=scored.get)


# An opening <a ...> tag: stops at the next "<" or ">", so each character is read by at
# most one attempt; the href inside it is read from the tag alone (bounded).
ANCHOR_OPEN = re.compile(r"<a\s[^<>]{0,4000}>", re.IGNORECASE)
HREF = re.compile(r"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
TAG = re.compile(r"<[^<>]*>")


def _anchors(html_body: str) -> list[tuple[str, str]]:
    """The <a href> of an HTML body with their text, in order, in one pass: each anchor's
    text runs to its </a> (or to the next anchor, or the end, if it never closes)."""
    lowered = html_body.lower()
    anchors = []
    position = 0
    while match := ANCHOR_OPEN.search(html_body, position):
        href = HREF.search(match.group(0))
        start = match.end()
        following = ANCHOR_OPEN.search(html_body, start)
        limit = following.start() if following is not None else len(html_body)
        end = lowered.find("</a", start, limit)
        end = limit if end < 0 else end
        if href is not None:
            url = html.unescape(next(group for group in href.groups() if group is not None))
            label = " ".join(html.unescape(TAG.sub(" ", html_body[start:end])).split())
            anchors.append((url, label))
        position = max(end, start)
    return anchors


def find_links(text: str, html_body: str) -> list[dict]:
    """`[{"url", "text"}]`: the HTML's http(s) anchors, then the text's URLs, each URL once."""
    found: list[tuple[str, str]] = []
    if html_body:
        found += _anchors(html_body[:MAX_SCAN])
    if "://" in text:  # every URL holds it: a text without one is not scanned
        found += [(match.group(0).rstrip(".,;:!?"), "") for match in URL.finditer(text[:MAX_SCAN])]
    links, seen = [], set()
    for url, label in found:
        url = html.unescape(url.strip())
        if not url.lower().startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        links.append({"url": url, "text": label or url})
    return links
