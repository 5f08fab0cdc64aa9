"""Text that came from outside perfgate (records files, baselines, manifests, exception messages), made safe
to read and to show. Imports no torch.

- `parse_json`: json.loads, where a value nested past the parser's recursion limit (about 1000 levels: a
  100,000-deep `[[[...]]]` in a records file or baseline) is a JSONDecodeError like any other bad JSON, not a
  RecursionError that every reader reported as a crash (exit 3).
- `visible`: a text with its control and format characters written out as escapes (`\\x1b`, `\\x00`,
  `\\u202e`, `\\u2028`, `\\r`, `\\n`), for every page, table and terminal line a person reads. Inductor's
  coloured exception text (ESC sequences) reaches a failed cell's reason; raw, it recoloured or cleared a
  terminal, U+202E reversed what followed it in a PR comment, and a `\\r\\n` broke a table row.
"""

from __future__ import annotations

import json
import re

TOO_DEEP = "a value nested deeper than the JSON reader follows (about 1000 levels)"

# Unicode 14 (Python 3.11's unicodedata) categories Cc (controls: ESC, NUL, CR, LF, DEL, C1), Cf (format:
# bidi overrides U+202A-E and U+2066-9, zero widths, the BOM), Cs (lone surrogates, which JSON's \udc80 can
# make and no UTF-8 file can hold), Zl and Zp (U+2028, U+2029). Spelt out rather than computed from
# unicodedata at import (1.1 M code points, ~0.3 s of every CLI start); test_text.py checks it against
# unicodedata.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}  # as Python and JSON write them, the ones people know


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text) -> str:
    """`text` (anything: str() of it) with every control, format, surrogate and line/paragraph separator
    character written as its escape, so what a person reads is what the text holds, on one line."""
    text = str(text)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def parse_json(text: str | bytes):
    """json.loads; nesting past the parser's limit raises json.JSONDecodeError(TOO_DEEP), as bad JSON does."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text if isinstance(text, str) else "", 0) from None
