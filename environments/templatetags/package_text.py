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

_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


@register.filter
def cut_at_sentence(text, limit: int = 140) -> str:
    """The whole sentences of `text` that fit in `limit` characters; when even the first does not fit, its
    words that do, with an ellipsis. Never a word or a sentence cut in the middle without saying so."""
    text = str(text or "").strip()
    if len(text) <= limit:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, limit + 1)]
    if ends:
        return text[:ends[-1]]
    words = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit - 1]
    return words.rstrip(",;:") + "…"
