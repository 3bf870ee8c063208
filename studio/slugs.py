"""Readable URL slugs from any name: letters are transliterated to ASCII ("Größe" -> "groesse",
"Привет" -> "privet", "Café" -> "cafe"), never dropped. One definition for teams and environments."""
import re
import unicodedata

# Letters Unicode does not decompose into ASCII, and the Greek and Cyrillic alphabets.
_LETTERS = {
    "ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ð": "d", "þ": "th", "ł": "l", "ı": "i", "ħ": "h",
    "ä": "ae", "ö": "oe", "ü": "ue",
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh", "з": "z", "и": "i", "й": "i",
    "к": "k", "л": "l", "м": "m", "н": "n", "о": "o", "п": "p", "р": "r", "с": "s", "т": "t", "у": "u", "ф": "f",
    "х": "kh", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch", "ъ": "", "ы": "y", "ь": "", "э": "e", "ю": "iu",
    "я": "ia", "і": "i", "ї": "i", "є": "ie", "ґ": "g",
    "α": "a", "β": "v", "γ": "g", "δ": "d", "ε": "e", "ζ": "z", "η": "i", "θ": "th", "ι": "i", "κ": "k", "λ": "l",
    "μ": "m", "ν": "n", "ξ": "x", "ο": "o", "π": "p", "ρ": "r", "σ": "s", "ς": "s", "τ": "t", "υ": "y", "φ": "f",
    "χ": "ch", "ψ": "ps", "ω": "o",
}


def transliterate(text: str) -> str:
    out = []
    for char in text.lower():
        if char in _LETTERS:
            out.append(_LETTERS[char])
            continue
        base = unicodedata.normalize("NFKD", char)
        # Greek and Cyrillic letters with accents decompose to a base letter the table knows.
        out.append(_LETTERS.get(base[:1], base.encode("ascii", "ignore").decode()))
    return "".join(out)


def slug_from(name: str, *, fallback: str, max_length: int = 80) -> str:
    """'Größe & Co.' -> 'groesse-co'; a name with no transliterable letter gives `fallback`."""
    slug = re.sub(r"[^a-z0-9]+", "-", transliterate(name or "")).strip("-")[:max_length].strip("-")
    return slug or fallback
