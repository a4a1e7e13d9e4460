"""mailboxes/markup.py finds each tag where libxml2's HTML parser finds it: generated
documents of the tokenizer's hard cases (quotes, comments, bogus comments, end tags with
attributes, raw text, unterminated everything), and no element the parser builds holds
more attributes than the scan counted in one tag."""
import random

import lxml.html
import pytest
from lxml import etree

from mailboxes.markup import MAX_ATTRIBUTES, RAW_TEXT, attribute_count, parseable, tags

PIECES = ['<p ', '<i ', ' ', '"', "'", '>', '<!--', '-->', '<!', '<?', '</', '</p ', '<script>', '</script>', '<style>',
          '</style>', '<textarea>', '</textarea>', '<svg>', '</svg>', '<![CDATA[', ']]>', '<title>', '</title>', '<math>',
          '<noscript>', '</noscript>', '=', '/', 'x', '<plaintext>', '<xmp>', '</xmp>', '--!>', '<!-->', '<!--->',
          '<iframe>', '</iframe>', '<noembed>', '</noembed>', '<noframes>', '</noframes>', '<table>', '<select>',
          '<template>', '\r', '\n', '\t', '\x0c', '\x0b', '<SCRIPT>', '</SCRIPT ', '</script/', '<a', '<body ',
          '<html ', '<frameset>', '<', '`', '<!DOCTYPE ', '<!--[if x]>']


def parsed_most_attributes(html: str) -> int:
    document = lxml.html.document_fromstring(html, parser=lxml.html.HTMLParser(huge_tree=True))
    return max((len(element.attrib) for element in document.iter() if isinstance(element.tag, str)), default=0)


def test_no_element_the_parser_builds_has_more_attributes_than_the_scan_counted():
    generator = random.Random(66)
    for _ in range(3000):
        pieces, names = [], 0
        for _ in range(generator.randint(1, 40)):
            if generator.random() < 0.35:
                names += 1
                pieces.append(f" a{names}=1" if generator.random() < 0.7 else f" b{names}")
            else:
                pieces.append(generator.choice(PIECES))
        html = "".join(pieces)
        counted = max((attribute_count(attributes) for _, attributes in tags(html)), default=0)
        try:
            built = parsed_most_attributes(html)
        except (etree.ParserError, ValueError):
            continue
        assert built <= counted, f"the parser built an element of {built} attributes in {html!r}"


@pytest.mark.parametrize("name", sorted(RAW_TEXT))
def test_the_parser_reads_the_raw_text_elements_content_as_text(name):
    assert parsed_most_attributes(f"<body><{name}><p a=1 b=2></{name}><i z=1>") == 1


def test_html_is_cut_before_the_first_tag_over_the_bound():
    over = "<p " + " ".join(f"a{index}" for index in range(MAX_ATTRIBUTES + 1)) + ">"
    at = "<p " + " ".join(f"a{index}" for index in range(MAX_ATTRIBUTES)) + ">"
    assert parseable(f"<b>x</b>{at}y{over}z") == f"<b>x</b>{at}y"
    assert parseable(f'<script>"{over}</script>') == f'<script>"{over}</script>'
    assert parseable(f'<p title="{over}">') == f'<p title="{over}">'
