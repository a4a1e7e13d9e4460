"""A mail's HTML cut to what libxml2 parses in time linear in its size, before the web inbox
cleans it (inbox/mail_html.py) or the HTML check reads it (checks/html_support.py).

libxml2 compares each attribute of a tag with the tag's earlier ones (duplicates are
dropped), so one tag of n attributes costs n²: a sender's single `<p>` of tens of
thousands of attributes would hold a web worker for seconds. A tag with more than
MAX_ATTRIBUTES attributes is where the HTML is cut: what came before it is kept whole, and
the parser's work is at most MAX_ATTRIBUTES times the message's size.

The cut is found by one pass of HTML5's tokenizer rules (https://html.spec.whatwg.org/
#tokenization), the rules libxml2 follows since 2.14 (tests/mailboxes/test_markup.py holds
it to them): comments, `<!…>` and `<?…>`, end tags, and the raw text of the elements whose
content is not markup (script, style, textarea, …) are skipped as the parser skips them, so
no attribute the parser would read can hide from the count."""
import re

MAX_ATTRIBUTES = 100
# Elements whose content is text up to their own end tag, as libxml2 tokenizes them
# (noscript's is markup there: scripting is off).
RAW_TEXT = frozenset({"script", "style", "xmp", "iframe", "noembed", "noframes", "textarea", "title"})

_SPACE = "\t\n\f\r "
_NAME = f"[^{_SPACE}/>]*"
# One attribute: its name (which may start with "=" and hold quotes or "<"), then perhaps
# "=" and a value, quoted (to the closing quote, or to the end of the text) or not.
_ATTRIBUTE = (f"[{_SPACE}/]*[^{_SPACE}/>][^{_SPACE}/>=]*"
              f"""(?:[{_SPACE}]*=[{_SPACE}]*(?:"[^"]*(?:"|\\Z)|'[^']*(?:'|\\Z)|[^{_SPACE}>]*))?""")
# A start or end tag: its name, its attributes, and its ">" (absent at the end of the text).
_TAG = re.compile(f"</?([A-Za-z]{_NAME})((?:{_ATTRIBUTE})*)[{_SPACE}/]*>?")
_ONE_ATTRIBUTE = re.compile(_ATTRIBUTE)
_COMMENT_END = re.compile(r"--!?>")


def _raw_text_end(name: str) -> re.Pattern:
    return re.compile(f"</{name}[{_SPACE}/>]", re.IGNORECASE)


_RAW_TEXT_ENDS = {name: _raw_text_end(name) for name in RAW_TEXT}


def parseable(html: str) -> str:
    """`html` up to its first tag of more than MAX_ATTRIBUTES attributes (all of it if none)."""
    for opening, attributes in tags(html):
        # An attribute takes two characters at least: a short tag cannot be over the bound.
        if len(attributes) > 2 * MAX_ATTRIBUTES and attribute_count(attributes) > MAX_ATTRIBUTES:
            return html[:opening]
    return html


def attribute_count(attributes: str) -> int:
    return sum(1 for _ in _ONE_ATTRIBUTE.finditer(attributes))


def tags(html: str):
    """(where it starts, its attributes' text) of each start and end tag the parser reads."""
    position = 0
    while (opening := html.find("<", position)) >= 0:
        following = html[opening + 1:opening + 2]
        after_slash = html[opening + 2:opening + 3]
        if html.startswith("<!--", opening):
            if html.startswith((">", "->"), opening + 4):  # "<!-->" and "<!--->" end at once
                position = html.index(">", opening + 4) + 1
                continue
            end = _COMMENT_END.search(html, opening + 4)
            if end is None:
                return
            position = end.end()
        elif following == "/" and after_slash == ">":
            position = opening + 3
        elif following == "/" and after_slash == "":
            return
        elif following in ("!", "?") or (following == "/" and not _ascii_letter(after_slash)):
            end = html.find(">", opening + 2)  # a bogus comment, to the next ">"
            if end < 0:
                return
            position = end + 1
        elif _ascii_letter(following) or following == "/":
            tag = _TAG.match(html, opening)
            yield opening, tag.group(2)
            position = tag.end()
            name = tag.group(1).lower()
            if following == "/":
                continue
            if name == "plaintext":  # the rest is text
                return
            if name in RAW_TEXT:
                end = _RAW_TEXT_ENDS[name].search(html, position)
                if end is None:
                    return
                position = end.start()
        else:
            position = opening + 1


def _ascii_letter(character: str) -> bool:
    return character.isascii() and character.isalpha()
