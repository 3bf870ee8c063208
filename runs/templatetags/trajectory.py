"""Template filters for showing trajectory data (JSON values) readably."""
import json

from django import template

from runs.action_names import action_label, rollout_action_names

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


# How a rollout's reproduction record reads: what decides the episode first, where it ran after.
REPRODUCTION_SECTIONS = (
    ("Episode", ("environment", "version", "content_hash", "entrypoint", "task_id", "seed", "repeat"), True),
    ("Agent", ("agent",), True),
    ("Limits", ("limits",), True),
    ("Environment sandbox", ("sandbox",), False),
    ("Agent sandbox", ("agent_sandbox",), False),
)


@register.filter
def reproduction_sections(record: dict):
    """[(title, [(key, value)], open)] of a reproduction record; keys no section names go last."""
    record = dict(record or {})
    sections = []
    for title, keys, open_ in REPRODUCTION_SECTIONS:
        part = {key: record.pop(key) for key in keys if key in record}
        if not part:
            continue
        if len(keys) == 1 and isinstance(part[keys[0]], dict):
            items = flat_items(part[keys[0]])
        else:
            items = flat_items(part)
        sections.append((title, items, open_))
    if record:
        sections.append(("Other", flat_items(record), True))
    return sections


@register.filter
def action_names_json(rollout) -> str:
    """The names of the rollout's discrete actions as JSON ({"2": "UP", ...}; "{}" when unnamed)."""
    return json.dumps(rollout_action_names(rollout))


@register.filter
def action_text(action, names) -> str:
    """A step's action as the replay shows it: "UP (2)" when the action has a name, else its JSON."""
    return action_label(action, names or {}) or as_json(action)
