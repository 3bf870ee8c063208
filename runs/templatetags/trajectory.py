"""Template filters for showing trajectory data (JSON values) readably."""
import json

from django import template

register = template.Library()


@register.filter
def as_json(value, indent=None):
    """JSON text of a value: strings stay as they are, everything else is compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=int(indent) if indent else None, ensure_ascii=False, separators=None if indent else (", ", ": "))
    except (TypeError, ValueError):
        return repr(value)


@register.filter
def flat_items(record: dict, prefix: str = ""):
    """A nested record as (dotted key, leaf value) pairs, so it reads as a two-column table."""
    items = []
    for key, value in (record or {}).items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            items.extend(flat_items(value, path))
        else:
            items.append((path, value))
    return items
