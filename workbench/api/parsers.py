"""The API's JSON parser: a body nested too deeply for Python's decoder is a 400 that says
so, not a RecursionError and a 500."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH_MESSAGE = (
    "the JSON body is nested too deeply to read; no request of this API nests more than a "
    "few levels"
)


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(MAX_DEPTH_MESSAGE) from None
