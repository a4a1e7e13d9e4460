"""A mail's HTML as the web inbox shows it: strangers' code, so it is cleaned here (no script,
form, frame, embed, meta refresh, base or link element, no event handler or javascript:
URL), its links open a new tab without referrer or opener, its `cid:` images point at the
message's own parts, its remote images are placeholders until the reader asks for them, and
the page that serves it forbids the rest by CSP (docs/inbox.md).

Cleaning takes time linear in the HTML's size: the HTML is cut before a tag the parser
would take quadratic time over (mailboxes/markup.py), the parser stops nesting at 256
levels, and the elements the cleaner would drop are dropped here first, in one pass (lxml's
`drop_tag` finds each element's place among its siblings and grows its neighbour's text,
both quadratic over many siblings)."""
import re
from urllib.parse import quote

from django.conf import settings
from django.core.cache import cache
from lxml import etree
from lxml import html as lxml_html
from lxml_html_clean import Cleaner

from accounts.inputs import whole_number_or_none
from mailboxes.markup import parseable

CLEANER = Cleaner(scripts=True, javascript=True, comments=True, style=False, inline_style=False, links=True,
                  meta=True, page_structure=False, processing_instructions=True, embedded=True, frames=True,
                  forms=True, annoying_tags=True, remove_unknown_tags=False, safe_attrs_only=False,
                  kill_tags=["base", "noscript", "template"])
# A document-wide policy: nothing runs, nothing is submitted, nothing is fetched but the
# message's own parts (and, once asked, images from anywhere).
POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src {images}; font-src 'none'; "
          "form-action 'none'; frame-src 'none'; connect-src 'none'; base-uri 'none'; frame-ancestors 'self'; "
          "sandbox allow-popups")
# What CLEANER would take out, with what is inside (killed) or leaving it in place
# (unwrapped), taken out by _strip first. The cleaner still runs after it, so a tag left
# off these lists is only slower, not let through.
KILLED = frozenset({"script", "link", "meta", "applet", "param", "button", "input", "select", "textarea", "base",
                    "noscript", "template", "frameset", "frame", "noframes", etree.Comment, etree.ProcessingInstruction})
UNWRAPPED = frozenset({"iframe", "embed", "layer", "object", "form", "blink", "marquee"})
SHOWN_CACHE_SECONDS = 3600
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


def shown_html_of(*, content_id: int, html: str, parts_url: str, remote_images: bool = False,
                  held_title: str = "") -> str:
    """shown_html of a stored message's content, cleaned once and kept in the shared cache
    for SHOWN_CACHE_SECONDS: a content never changes, and each look at the message asks."""
    # Quoted: a cache key holds no space or control character.
    key = f"relay:shown-html:{settings.RELAY_VERSION}:{content_id}:{remote_images:d}:" + quote(
        f"{parts_url} {held_title}", safe="")
    shown = cache.get(key)
    if shown is None:
        shown = shown_html(html, parts_url=parts_url, remote_images=remote_images, held_title=held_title)
        cache.set(key, shown, SHOWN_CACHE_SECONDS)
    return shown


def shown_html(html: str, *, parts_url: str, remote_images: bool = False, held_title: str = "") -> str:
    """The cleaned document, `cid:` images pointed at `parts_url` + their Content-ID; until
    `remote_images`, a remote image shows a placeholder titled `held_title` rather than the
    broken image the policy's refusal would leave."""
    if not html.strip():
        return ""
    try:
        document = lxml_html.document_fromstring(parseable(html))
    except (etree.ParserError, ValueError):
        return ""
    for style in document.iter("style"):
        style.text = IMPORT.sub("", style.text or "")
    _strip(document)
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
        document = lxml_html.document_fromstring(parseable(html))
    except (etree.ParserError, ValueError):
        return {"chars": 0, "blocks": 0, "images": 0}
    body = document.find("body")
    body = document if body is None else body
    for hidden in body.iter("style", "script", "title"):
        hidden.text = ""
    images = 0
    for image in body.iter("img"):
        declared = (image.get("height") or "").strip().removesuffix("px")
        height = whole_number_or_none(declared)
        images += UNSIZED_IMAGE if height is None else min(height, 2000)
    return {"chars": len(" ".join(body.text_content().split())), "images": min(images, 20000),
            "blocks": sum(1 for _ in body.iter(*BLOCKS))}


def _strip(document) -> None:
    """Takes out the KILLED and UNWRAPPED elements in one pass, each element moved at most
    once, each run of text joined once."""
    parents = [document]
    while parents:
        parent = parents.pop()
        if not any(child.tag in KILLED or child.tag in UNWRAPPED for child in parent):
            parents.extend(parent)
            continue
        # The children that stay, in order, and the text before the first (texts[0]) and
        # after each (texts[i + 1]), gathered as pieces.
        kept, texts, taken = [], [[parent.text or ""]], []
        pending = list(reversed(parent))
        while pending:
            item = pending.pop()
            if isinstance(item, str):
                texts[-1].append(item)
            elif item.tag in KILLED:
                texts[-1].append(item.tail or "")
                taken.append(item)
            elif item.tag in UNWRAPPED:
                texts[-1].append(item.text or "")
                pending.append(item.tail or "")
                pending.extend(reversed(item))
                taken.append(item)
            else:
                kept.append(item)
                texts.append([item.tail or ""])
        previous = None
        for child in kept:
            if child.getparent() is not parent:  # out of an unwrapped element, into its place
                if previous is None:
                    parent.insert(0, child)
                else:
                    previous.addnext(child)
            previous = child
        for element in taken:
            if element.getparent() is parent:
                parent.remove(element)
        parent.text = "".join(texts[0]) or None
        for child, pieces in zip(kept, texts[1:]):
            child.tail = "".join(pieces) or None
        parents.extend(kept)
