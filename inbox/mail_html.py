"""A mail's HTML as the web inbox shows it: strangers' code, so it is cleaned here (no script,
form, frame, embed, meta refresh, base or link element, no event handler or javascript:
URL), its links open a new tab without referrer or opener, its `cid:` images point at the
message's own parts, and the page that serves it forbids the rest by CSP (docs/inbox.md)."""
import re

from lxml import etree
from lxml import html as lxml_html
from lxml_html_clean import Cleaner

CLEANER = Cleaner(scripts=True, javascript=True, comments=True, style=False, inline_style=False, links=True,
                  meta=True, page_structure=False, processing_instructions=True, embedded=True, frames=True,
                  forms=True, annoying_tags=True, remove_unknown_tags=False, safe_attrs_only=False,
                  kill_tags=["base", "noscript", "template"])
# A document-wide policy: nothing runs, nothing is submitted, nothing is fetched but the
# message's own parts (and, once asked, images from anywhere).
POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src {images}; font-src 'none'; "
          "form-action 'none'; frame-src 'none'; connect-src 'none'; base-uri 'none'; frame-ancestors 'self'; "
          "sandbox allow-popups")
CID = re.compile(r"^cid:", re.IGNORECASE)
# An @import rule, to its semicolon: dropped whole (the cleaner would leave its URL behind,
# breaking the rule after it); the policy refuses remote style sheets anyway.
IMPORT = re.compile(r"@\s*import\b[^;{}]*;?", re.IGNORECASE)


def policy(parts_url: str, *, remote_images: bool) -> str:
    """The Content-Security-Policy of a mail's HTML: its parts (`parts_url`, an absolute
    prefix) and data: images, and any image at all once the reader asked for them."""
    images = f"{parts_url} data:" + (" https: http:" if remote_images else "")
    return POLICY.format(images=images)


def shown_html(html: str, *, parts_url: str) -> str:
    """The cleaned document, `cid:` images pointed at `parts_url` + their Content-ID."""
    if not html.strip():
        return ""
    try:
        document = lxml_html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return ""
    for style in document.iter("style"):
        style.text = IMPORT.sub("", style.text or "")
    CLEANER(document)
    for element in document.iter("a", "area"):
        if element.get("href"):
            element.set("target", "_blank")
            element.set("rel", "noopener noreferrer")
        else:
            element.attrib.pop("target", None)
    for element in document.iter("img"):
        source = element.get("src", "")
        if CID.match(source):
            element.set("src", parts_url + source[4:].strip("<> "))
    head = document.find("head")
    if head is None:
        head = etree.SubElement(document, "head")
        document.insert(0, head)
    for name, content in (("referrer", "no-referrer"), ("viewport", "width=device-width, initial-scale=1")):
        meta = etree.Element("meta", name=name, content=content)
        head.insert(0, meta)
    head.insert(0, etree.Element("meta", charset="utf-8"))
    return "<!doctype html>\n" + lxml_html.tostring(document, encoding="unicode")
