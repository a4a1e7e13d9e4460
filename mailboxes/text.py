"""The readable text of a message, for what reads it: its words for `q` (docs/api.md) and its
codes (docs/api.md)."""
import html
import re

# Characters of an HTML body looked at: a 10 MB body is not read through for its text.
HTML_SCAN_MAX = 200_000


HIDDEN_OPEN = re.compile(r"<(script|style|head)\b", re.IGNORECASE)
# A tag ends at its ">", or where the next one starts: "<<<<" is read once, not once per "<".
TAG = re.compile(r"<[^<>]*>?")


def text_of_html(html_body: str) -> str:
    """Readable text of an HTML-only mail: tags, scripts and styles dropped, entities
    decoded. One pass, whatever the markup (docs/api.md, "Codes and links"): a hidden
    element runs to its closing tag, or to the end if it never closes."""
    body = html_body[:HTML_SCAN_MAX]
    lowered = body.lower()
    visible = []
    position = 0
    while match := HIDDEN_OPEN.search(body, position):
        visible.append(body[position:match.start()])
        close = lowered.find(f"</{match.group(1).lower()}", match.end())
        if close < 0:
            position = len(body)
            break
        end = body.find(">", close)
        position = len(body) if end < 0 else end + 1
    visible.append(body[position:])
    return html.unescape(TAG.sub(" ", " ".join(visible)))
