"""How a package's own text reads where there is room for one line (the environments list)."""
import re

from django import template

register = template.Library()

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKS = re.compile(r"(\*\*|__|`+|^#+\s*)", re.MULTILINE)


@register.filter
def markdown_plain(text) -> str:
    """Markdown as plain words: links and images by their text, code and emphasis marks and heading hashes
    dropped; Django escapes the result like any other text."""
    return " ".join(_MARKS.sub("", _LINK.sub(r"\1", str(text or ""))).split())
