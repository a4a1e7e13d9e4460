"""Which HTML and CSS features a mail's HTML uses, and how well the email clients support
them, from caniemail's data (checks/data/caniemail.json; `make caniemail` refreshes it).

One pass of lxml's HTML parser over the document and one of tinycss2's over each style
sheet and style attribute (each distinct attribute once): linear in the message, once the
HTML is cut before a tag the parser would take quadratic time over (mailboxes/markup.py)."""
import functools
import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import lxml.html
import tinycss2
from lxml import etree

from mailboxes.markup import parseable

DATA_FILE = Path(__file__).with_name("data") / "caniemail.json"
SUPPORT = {"y": "yes", "a": "partial", "n": "no"}
WEIGHT = {"yes": 1.0, "partial": 0.5, "no": 0.0}

ATTRIBUTES = {name: f"html-{name}" for name in (
    "align", "background", "cellpadding", "cellspacing", "dir", "height", "width", "hidden", "lang", "required",
    "role", "srcset", "target", "valign", "popover", "aria-describedby", "aria-hidden", "aria-label",
    "aria-labelledby", "aria-live")} | {"loading": "html-loading-attribute", "inert": "css-inert-attribute"}
TAGS = {name: f"html-{name}" for name in (
    "abbr", "acronym", "address", "audio", "base", "bdi", "blockquote", "body", "code", "del", "dfn", "dialog",
    "div", "form", "hr", "img", "link", "marquee", "meter", "object", "p", "picture", "pre", "progress", "rp", "rt",
    "ruby", "select", "small", "span", "strike", "strong", "style", "svg", "table", "textarea", "video", "wbr")}
TAGS |= {f"h{level}": "html-h1-h6" for level in range(1, 7)} | {name: "html-lists" for name in ("ul", "ol", "dl")}
TAGS |= {name: "html-semantics" for name in ("article", "aside", "details", "figcaption", "figure", "footer",
                                               "header", "main", "mark", "nav", "section", "summary", "time")}
TAGS |= {"map": "html-image-maps"}
INPUTS = {"checkbox", "hidden", "radio", "reset", "submit", "text"}
IMAGE_TYPES = {"png": "image-png", "gif": "image-gif", "jpg": "image-jpg", "jpeg": "image-jpg", "webp": "image-webp",
               "svg": "image-svg", "avif": "image-avif", "bmp": "image-bmp", "ico": "image-ico", "tif": "image-tiff",
               "tiff": "image-tiff", "apng": "image-apng", "heif": "image-heif", "heic": "image-heif",
               "mp4": "image-mp4", "hdr": "image-hdr"}

# Properties whose feature is not "css-" and their own name: the logical margins and
# paddings, then the rest.
PROPERTIES = {f"{box}-{axis}-{edge}": f"css-{box}-{axis}-start-end"
              for box in ("margin", "padding") for axis in ("block", "inline") for edge in ("start", "end")}
PROPERTIES |= {f"{box}-{axis}": f"css-{box}-inline-block" for box in ("margin", "padding") for axis in ("block", "inline")}
PROPERTIES |= {
    "border-inline": "css-border-inline-block", "border-block": "css-border-inline-block",
    "top": "css-left-right-top-bottom", "right": "css-left-right-top-bottom",
    "bottom": "css-left-right-top-bottom", "left": "css-left-right-top-bottom",
    "block-size": "css-block-inline-size", "inline-size": "css-inline-size",
    "column-gap": "css-gap", "row-gap": "css-gap",
    "columns": "css-column-count", "column-width": "css-column-layout-properties",
    "column-rule": "css-column-layout-properties", "column-span": "css-column-layout-properties",
    "column-fill": "css-column-layout-properties",
    "contain-intrinsic-size": "css-intrinsic-size",
    "text-decoration-skip": "css-text-decoration-skip-ink",
}
PROPERTY_PREFIXES = (("border-inline-", "css-border-inline-block-individual"),
                     ("border-block-", "css-border-inline-block-individual"),
                     ("scroll-snap", "css-scroll-snap"), ("grid-template", "css-grid-template"),
                     ("column-rule-", "css-column-layout-properties"))
FUNCTIONS = {"calc": "css-unit-calc", "clamp": "css-function-clamp", "min": "css-function-min",
             "max": "css-function-max", "light-dark": "css-function-light-dark", "var": "css-variables",
             "rgb": "css-rgb", "rgba": "css-rgba", "linear-gradient": "css-linear-gradient",
             "repeating-linear-gradient": "css-linear-gradient", "radial-gradient": "css-radial-gradient",
             "repeating-radial-gradient": "css-radial-gradient", "conic-gradient": "css-conic-gradient",
             "repeating-conic-gradient": "css-conic-gradient", "oklch": "css-modern-color", "oklab": "css-modern-color",
             "lab": "css-modern-color", "lch": "css-modern-color", "color-mix": "css-modern-color"}
DISPLAY = {"flex": "css-display-flex", "inline-flex": "css-display-flex", "grid": "css-display-grid",
           "inline-grid": "css-display-grid", "none": "css-display-none"}
MEDIA_FEATURES = {"prefers-color-scheme": "css-at-media-prefers-color-scheme",
                  "prefers-reduced-motion": "css-at-media-prefers-reduced-motion",
                  "orientation": "css-at-media-orientation", "hover": "css-at-media-hover"}
AT_RULES = {"media": "css-at-media", "font-face": "css-at-font-face", "import": "css-at-import",
            "keyframes": "css-at-keyframes", "supports": "css-at-supports"}
PSEUDO_ELEMENTS = {"before", "after", "first-letter", "first-line", "marker", "placeholder"}
VENDOR = re.compile(r"^-(?:webkit|moz|ms|o)-")
XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]{0,200}\?>")


@functools.cache
def data() -> dict:
    """caniemail's data as shipped: {"date", "features": {slug: feature}, "clients": [...]}"""
    raw = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    names = raw["nicenames"]
    clients = {}
    features = {}
    for feature in raw["data"]:
        support, note_numbers = {}, set()
        for family, platforms in (feature.get("stats") or {}).items():
            for platform, versions in platforms.items():
                if not versions:
                    continue
                client = f"{family}.{platform}"
                clients.setdefault(client, {
                    "id": client, "family": family,
                    "name": f"{names['family'].get(family, family)} {names['platform'].get(platform, platform)}"})
                latest = str(list(versions.values())[-1]).strip()
                if latest[:1] in SUPPORT:
                    support[client] = SUPPORT[latest[:1]]
                note_numbers.update(re.findall(r"#(\d+)", latest))
        notes = [feature["notes"]] if feature.get("notes") else []
        notes += [text for number, text in (feature.get("notes_by_num") or {}).items() if number in note_numbers]
        features[feature["slug"]] = {"slug": feature["slug"], "title": feature["title"], "url": feature["url"],
                                     "support": support, "notes": notes}
    return {"date": raw["last_update_date"][:10], "features": features,
            "clients": sorted(clients.values(), key=lambda client: client["id"]),
            "family_names": {family: names["family"].get(family, family) for family in
                             {client["family"] for client in clients.values()}}}


def _property_feature(name: str, known: dict) -> str | None:
    name = VENDOR.sub("", name)
    if name in PROPERTIES:
        return PROPERTIES[name]
    if name.endswith("-radius"):
        return "css-border-radius-logical" if ("-start-" in name or "-end-" in name) else "css-border-radius"
    for prefix, slug in PROPERTY_PREFIXES:
        if name.startswith(prefix):
            return slug
    parts = name.split("-")
    while parts:  # margin-top → css-margin, text-decoration-line → itself
        slug = "css-" + "-".join(parts)
        if slug in known:
            return slug
        parts.pop()
    return None


class _Finder:
    """Counts the features of one document."""

    def __init__(self) -> None:
        self.found: Counter[str] = Counter()
        self.known = data()["features"]
        self._styles: dict[str, Counter] = {}

    # --- CSS ---------------------------------------------------------------------------------
    def _value(self, tokens, found: Counter) -> None:
        # A stack, not recursion: a sender may nest functions thousands deep.
        pending = [iter(tokens)]
        while pending:
            for token in pending[-1]:
                kind = token.type
                if kind == "function":
                    name = VENDOR.sub("", token.lower_name)
                    if name in FUNCTIONS:
                        found[FUNCTIONS[name]] += 1
                    pending.append(iter(token.arguments))
                    break
                if kind == "dimension":
                    unit = token.lower_unit
                    if f"css-unit-{unit}" in self.known:
                        found[f"css-unit-{unit}"] += 1
                elif kind == "percentage":
                    found["css-unit-percent"] += 1
                elif kind == "ident" and token.lower_value == "initial":
                    found["css-unit-initial"] += 1
                elif kind == "ident" and token.lower_value == "system-ui":
                    found["css-sytem-ui"] += 1
            else:
                pending.pop()

    def _declarations(self, nodes, found: Counter) -> None:
        for node in nodes:
            if node.type == "comment":
                found["css-comments"] += 1
            if node.type != "declaration":
                continue
            name = node.lower_name
            if name.startswith("--"):
                found["css-variables"] += 1
                continue
            slug = _property_feature(name, self.known)
            if name == "display":
                words = [token.lower_value for token in node.value if token.type == "ident"]
                slug = next((DISPLAY[word] for word in words if word in DISPLAY), "css-display")
            if slug:
                found[slug] += 1
            if node.important:
                found["css-important"] += 1
            self._value(node.value, found)

    def _selector(self, tokens) -> None:
        found = self.found
        previous = None
        for index, token in enumerate(tokens):
            kind = token.type
            if kind == "literal":
                if token.value == ":":
                    following = tokens[index + 1] if index + 1 < len(tokens) else None
                    if following is not None and following.type == "literal" and following.value == ":":
                        previous = token
                        continue
                    if following is not None and following.type in ("ident", "function"):
                        name = following.lower_name if following.type == "function" else following.lower_value
                        double = previous is not None and previous.type == "literal" and previous.value == ":"
                        kind = "element" if double or name in PSEUDO_ELEMENTS else "class"
                        if f"css-pseudo-{kind}-{name}" in self.known:
                            found[f"css-pseudo-{kind}-{name}"] += 1
                elif token.value == ">":
                    found["css-selector-child"] += 1
                elif token.value == "+":
                    found["css-selector-adjacent-sibling"] += 1
                elif token.value == "~":
                    found["css-selector-general-sibling"] += 1
                elif token.value == ",":
                    found["css-selector-grouping"] += 1
                elif token.value == "*":
                    found["css-selector-universal"] += 1
                elif token.value == "." and previous is not None and previous.type in ("ident", "hash", "[] block"):
                    found["css-selector-chaining"] += 1
                if token.value == ".":
                    found["css-selector-class"] += 1
            elif kind == "hash":
                found["css-selector-id"] += 1
            elif kind == "[] block":
                found["css-selector-attribute"] += 1
            elif kind == "whitespace" and previous is not None and previous.type in ("ident", "hash", "[] block"):
                following = tokens[index + 1] if index + 1 < len(tokens) else None
                if following is not None and following.type in ("ident", "hash", "[] block") or (
                        following is not None and following.type == "literal" and following.value in ".*:"):
                    found["css-selector-descendant"] += 1
            elif kind == "ident" and (previous is None or previous.type in ("whitespace", "literal")
                                      and getattr(previous, "value", " ") in " >+~,"):
                found["css-selector-type"] += 1
            previous = token

    def _rules(self, rules) -> None:
        # Rules nested in @media and @supports wait on a list, not on the call stack: a sender
        # may nest them thousands deep.
        pending = [rules]
        while pending:
            for rule in pending.pop():
                if rule.type == "comment":
                    self.found["css-comments"] += 1
                elif rule.type == "qualified-rule":
                    self._selector(rule.prelude)
                    self._declarations(tinycss2.parse_blocks_contents(rule.content, skip_whitespace=True), self.found)
                elif rule.type == "at-rule":
                    name = VENDOR.sub("", rule.lower_at_keyword)
                    if name in AT_RULES:
                        self.found[AT_RULES[name]] += 1
                    if name == "media":
                        for token in rule.prelude:
                            if token.type == "() block":
                                self._media_feature(token.content)
                    if name in ("media", "supports") and rule.content is not None:
                        pending.append(tinycss2.parse_rule_list(rule.content, skip_comments=False,
                                                                skip_whitespace=True))
                    elif name == "font-face" and rule.content is not None:
                        self._declarations(tinycss2.parse_blocks_contents(rule.content, skip_whitespace=True),
                                           Counter())

    def _media_feature(self, tokens) -> None:
        for token in tokens:
            if token.type == "ident":
                name = token.lower_value.removeprefix("min-").removeprefix("max-")
                name = VENDOR.sub("", name).removeprefix("min-").removeprefix("max-")
                if name in MEDIA_FEATURES:
                    self.found[MEDIA_FEATURES[name]] += 1
                elif name in ("device-pixel-ratio", "resolution"):
                    self.found["css-at-media-device-pixel-ratio"] += 1
                return

    def style_sheet(self, text: str) -> None:
        self._rules(tinycss2.parse_stylesheet(text, skip_comments=False, skip_whitespace=True))

    def style_attribute(self, text: str) -> None:
        # Mail built by templates repeats the same few style attributes thousands of times.
        counted = self._styles.get(text)
        if counted is None:
            counted = Counter()
            self._declarations(tinycss2.parse_blocks_contents(text, skip_whitespace=True), counted)
            self._styles[text] = counted
        self.found.update(counted)

    # --- HTML ---------------------------------------------------------------------------------
    def image(self, source: str) -> None:
        source = source.strip()
        if source[:5].lower() == "data:":
            self.found["image-base64"] += 1
            kind = source[5:source.find(";")].lower().rpartition("/")[2] if ";" in source[:40] else ""
        else:
            kind = urlsplit(source).path.rpartition(".")[2].lower() if "." in source else ""
        kind = kind.removesuffix("+xml")
        if kind in IMAGE_TYPES:
            self.found[IMAGE_TYPES[kind]] += 1

    def element(self, element) -> None:
        found = self.found
        tag = element.tag
        if tag is etree.Comment:
            found["html-comments"] += 1
            return
        if not isinstance(tag, str):
            return
        tag = tag.lower()
        if tag in TAGS:
            found[TAGS[tag]] += 1
        attributes = element.attrib
        for name in attributes:
            name = name.lower()
            if name in ATTRIBUTES:
                found[ATTRIBUTES[name]] += 1
        if tag == "input":
            kind = attributes.get("type", "text").lower()
            if kind in INPUTS:
                found[f"html-input-{kind}"] += 1
        elif tag == "button":
            kind = attributes.get("type", "submit").lower()
            if kind in ("submit", "reset"):
                found[f"html-button-{kind}"] += 1
        elif tag == "a":
            href = attributes.get("href", "").strip().lower()
            if href.startswith("#"):
                found["html-anchor-links"] += 1
            elif href.startswith("mailto:"):
                found["html-mailto-links"] += 1
        elif tag == "img" and "src" in attributes:
            self.image(attributes["src"])
        elif tag == "meta" and attributes.get("name", "").lower() in ("color-scheme", "supported-color-schemes"):
            found["html-meta-color-scheme"] += 1
        elif tag == "style" and element.text:
            self.style_sheet(element.text)
        style = attributes.get("style")
        if style:
            self.style_attribute(style)


def features_used(html: str) -> Counter:
    """How many times the HTML uses each of caniemail's features."""
    finder = _Finder()
    # lxml refuses a str that declares its own encoding (XHTML mail's <?xml … encoding=…?>).
    html = parseable(XML_DECLARATION.sub("", html, count=1))
    try:
        document = lxml.html.document_fromstring(html, parser=lxml.html.HTMLParser(huge_tree=True))
    except (etree.ParserError, ValueError):
        return finder.found
    if re.match(r"\s*<!doctype", html[:1024], re.IGNORECASE):
        finder.found["html-doctype"] += 1
    for element in document.iter():
        finder.element(element)
    if "html-body" in finder.found and not re.search(r"<body\b", html, re.IGNORECASE):
        del finder.found["html-body"]  # the parser's own, around a fragment: the sender wrote none
    return Counter({slug: count for slug, count in finder.found.items() if slug in finder.known})


def html_report(html: str) -> dict:
    """The check's answer: the features some client lacks, a score per client family and
    overall (of the uses the data has tested in those clients, the share supported, partly
    supported counting half: a client tested on little of the message weighs little), and
    how much of the message each score rests on (`tested`: the share of its uses covered)."""
    known = data()
    if not html.strip():
        return {"data_date": known["date"], "clients": known["clients"], "score": None, "tested": None,
                "features": []}
    used = features_used(html)
    uses = sum(used.values())
    supported, tested_uses = {}, {}
    for client in known["clients"]:
        weights = [(count, WEIGHT[support]) for slug, count in used.items()
                   if (support := known["features"][slug]["support"].get(client["id"])) is not None]
        total = sum(count for count, _ in weights)
        if total:
            supported[client["id"]] = sum(count * weight for count, weight in weights)
            tested_uses[client["id"]] = total
    score = _by_family(known["clients"], supported, tested_uses)
    tested = _by_family(known["clients"], tested_uses, dict.fromkeys(tested_uses, uses))
    features = []
    for slug, count in used.items():
        feature = known["features"][slug]
        if any(support != "yes" for support in feature["support"].values()):
            features.append({**feature, "count": count})
    features.sort(key=lambda item: (sum(WEIGHT[s] for s in item["support"].values()) / max(1, len(item["support"])),
                                    item["slug"]))
    return {"data_date": known["date"], "clients": known["clients"], "score": score, "tested": tested,
            "features": features}


def _by_family(clients: list[dict], part: dict[str, float], whole: dict[str, float]) -> dict:
    """`overall` (the sum of every client's `part` over the sum of its `whole`) and the same
    over each family's clients."""
    families: dict[str, list[str]] = {}
    for client in clients:
        if client["id"] in part:
            families.setdefault(client["family"], []).append(client["id"])

    def ratio(ids: list[str]) -> float:
        return _round(sum(part[i] for i in ids) / sum(whole[i] for i in ids))

    found = {"overall": ratio(list(part)) if part else None}
    return found | {family: ratio(ids) for family, ids in sorted(families.items())}


def _round(value: float) -> float:
    return round(value, 3)
