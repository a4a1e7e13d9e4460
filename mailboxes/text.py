"""The readable text of a message, for what reads it: its words for `q` (SPEC §11) and its
codes (SPEC §9)."""
import html
import re

# Characters of an HTML body looked at: a 10 MB body is not read through for its text.
HTML_SCAN_MAX = 200_000


def text_of_html(html_body: str) -> str:
    """Readable text of an HTML-only mail: tags, scripts and styles dropped, entities
    decoded."""
    without_hidden = re.sub(r"(?is)<(script|style|head)\b.*?</\1>", " ", html_body[:HTML_SCAN_MAX])
    return html.unescape(re.sub(r"<[^>]+>", " ", without_hidden))
