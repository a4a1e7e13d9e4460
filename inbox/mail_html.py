"""A mail's HTML as the web inbox shows it: strangers' code, so it is cleaned here (no script,
form, frame, embed, meta refresh, base or link element, no event handler or javascript:
URL), its links open a new tab without referrer or opener, its `cid:` images point at the
message's own parts, its remote images are placeholders until the reader asks for them, and
the page that serves it forbids the rest by CSP (docs/inbox.md)."""
import re
from urllib.parse import quote

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
REMOTE = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
# A held remote image: a picture frame drawn in the mail's own document (a data: URL, which
# the policy allows), at the size the mail gave the image.
HELD_IMAGE = ("data:image/svg+xml," + quote(
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 48 32" width="48" height="32">'
    '<rect x="14" y="8" width="20" height="16" rx="2" fill="none" stroke="#6b7785" stroke-width="1.5"/>'
    '<path d="M16 22l5-6 4 4 3-3 4 5z" fill="#6b7785"/><circle cx="29" cy="12.5" r="1.8" fill="#6b7785"/></svg>'))
HELD_STYLE = "img[data-held]{background:#eef1f4;outline:1px dashed #8a96a3;outline-offset:-1px;object-fit:contain}"
# What a page can know of a mail's height without laying it out: its visible characters,
# its blocks (each at least a line) and its images' declared heights.
BLOCKS = ("p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "hr", "table")
UNSIZED_IMAGE = 120
# An @import rule, to its semicolon: dropped whole (the cleaner would leave its URL behind,
# breaking the rule after it); the policy refuses remote style sheets anyway.
IMPORT = re.compile(r"@\s*import\b[^;{}]*;?", re.IGNORECASE)


def policy(parts_url: str, *, remote_images: bool) -> str:
    """The Content-Security-Policy of a mail's HTML: its parts (`parts_url`, an absolute
    prefix) and data: images, and any image at all once the reader asked for them."""
    images = f"{parts_url} data:" + (" https: http:" if remote_images else "")
    return POLICY.format(images=images)


def shown_html(html: str, *, parts_url: str, remote_images: bool = False, held_title: str = "") -> str:
    """The cleaned document, `cid:` images pointed at `parts_url` + their Content-ID; until
    `remote_images`, a remote image shows a placeholder titled `held_title` rather than the
    broken image the policy's refusal would leave."""
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
        elif not remote_images and REMOTE.match(source):
            element.set("src", HELD_IMAGE)
            element.attrib.pop("srcset", None)
            element.set("data-held", "")
            element.set("title", element.get("alt") or held_title)
    head = document.find("head")
    if head is None:
        head = etree.SubElement(document, "head")
        document.insert(0, head)
    for name, content in (("referrer", "no-referrer"), ("viewport", "width=device-width, initial-scale=1")):
        meta = etree.Element("meta", name=name, content=content)
        head.insert(0, meta)
    head.insert(0, etree.Element("meta", charset="utf-8"))
    held = etree.SubElement(head, "style")
    held.text = HELD_STYLE
    return "<!doctype html>\n" + lxml_html.tostring(document, encoding="unicode")


def frame_hint(html: str) -> dict:
    """What the page sizes the mail's frame by (docs/inbox.md, "Mail's HTML"): the frame may
    run no script and shares no origin, so nothing can measure it; these let the page's
    script estimate its height for the width it has."""
    try:
        document = lxml_html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return {"chars": 0, "blocks": 0, "images": 0}
    body = document.find("body")
    body = document if body is None else body
    for hidden in body.iter("style", "script", "title"):
        hidden.text = ""
    images = 0
    for image in body.iter("img"):
        declared = (image.get("height") or "").strip().removesuffix("px")
        images += min(int(declared), 2000) if declared.isdigit() else UNSIZED_IMAGE
    return {"chars": len(" ".join(body.text_content().split())), "images": min(images, 20000),
            "blocks": sum(1 for _ in body.iter(*BLOCKS))}
