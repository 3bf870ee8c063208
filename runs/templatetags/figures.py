"""How run figures read on a page: one format for a reload and a live update (both render these)."""
from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def percent(ratio) -> str:
    """0.25 -> "25%"; no ratio (nothing done yet) -> "—"."""
    return "—" if ratio is None else f"{round(100 * ratio)}%"


@register.filter
def reward(value, digits: int = 3) -> str:
    """A reward to `digits` decimals; none -> "—" (never "0": a missing reward is not a zero)."""
    return "—" if value is None else f"{value:.{int(digits)}f}"


@register.filter
def share(part, whole) -> int:
    """part of whole as a whole percentage for a bar's width (0 when whole is 0)."""
    return round(100 * part / whole) if whole else 0


@register.filter
def seed_ranges(seeds) -> str:
    """A run's seeds as ranges: "0-19, 25"."""
    from runs.seeds import format_seeds

    return format_seeds(seeds or [])


@register.filter
def signed_percent(ratio) -> str:
    """A difference of two rates: 0.25 -> "+25 pts"."""
    return "—" if ratio is None else f"{round(100 * ratio):+d} pts"


@register.filter
def signed_reward(value) -> str:
    return "—" if value is None else f"{value:+.3f}"


@register.filter
def code_spans(text) -> str:
    """A sentence of the studio's own (a quality check's) with its `names` set as code; the rest escaped."""
    parts = escape(str(text)).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return escape(str(text))
    return mark_safe("".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts)))
