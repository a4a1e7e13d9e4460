import json

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with deeply nested JSON as a 400: the json module raises
    RecursionError for it, which DRF does not catch (it would be a 500). And a string
    holding a lone surrogate (`"\\ud800"`, which JSON allows and UTF-8 cannot encode) is
    a 400 here rather than an error where the text is stored."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
            json.dumps(data, ensure_ascii=False).encode()
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        except UnicodeEncodeError:
            raise ParseError("JSON parse error - a string holds a lone surrogate (\\ud800-\\udfff).") from None
        return data
