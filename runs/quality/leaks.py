"""The leak scan (check `leak`): does what the agent is shown hold a hidden answer? Deterministic and
after the fact: it reads the audit's stored episodes (the studio's own record), never the sandbox.

Searched for: the values of the version's `hidden_task_fields` in each task, and the oracle's answers
(the answering values of its last action in each episode it passed: a string action, or the
arguments of a dict action, never a bare number or array, which are controls, not answers). Each as
text, as JSON and case-folded, matched on whole words (42 is not found in 142 or 4.25).

Searched in: every reset observation and reset info of the audit's rollouts; every observation and
info of the `noop` probe's steps that the agent still acted on (not the last: a verdict shown after
the episode ends reaches no action; and only noop's, whose one fixed action asks for nothing, so
what its steps show the environment hands out unasked, while a tool result another agent asked for
is learning, not a leak); the tool specs the agent is given; and, for a browser version, the files
of its `site/` that the agent's browser can open.

Not a secret: a value shorter than 2 characters (too common to mean anything), and a value the
task's visible fields already show (a guessing game's range ends may be its secret).
"""
import json
import re

from django.db.models import F

from ..models import Rollout, RolloutStatus, Step
from .models import AuditRole

MIN_LENGTH = 2
MAX_HITS = 50
# Keys of an action that say what it does, not what it answers.
VERB_KEYS = frozenset({"tool", "name", "action", "type", "id", "function", "element"})


def texts_of(value) -> list[str]:
    """The forms a value may take in what the agent sees: as text and as JSON, case-folded."""
    if value is None or isinstance(value, bool):
        return []
    forms = {str(value) if isinstance(value, (str, int, float)) else json.dumps(value, sort_keys=True)}
    forms.add(json.dumps(value, sort_keys=True))
    forms.add(json.dumps(value, sort_keys=True, ensure_ascii=False))
    return sorted({form.casefold() for form in forms if len(form.strip()) >= MIN_LENGTH})


def pattern_of(texts) -> re.Pattern | None:
    if not texts:
        return None
    alternatives = "|".join(re.escape(text) for text in sorted(texts, key=len, reverse=True))
    # Whole words: no letter or digit either side, and a number is not part of a longer decimal.
    return re.compile(rf"(?<![^\W_])(?<!\d\.)(?:{alternatives})(?![^\W_])(?!\.\d)")


def oracle_answers(action) -> list:
    """The answering values of an action (see the module's docstring)."""
    if isinstance(action, str):
        return [action]
    if not isinstance(action, dict):
        return []
    values = []
    for key, value in action.items():
        if key in VERB_KEYS:
            continue
        if isinstance(value, dict):
            values.extend(oracle_answers(value))
        elif value is not None and not isinstance(value, bool):
            values.append(value)
    return values


def leaves(value, path=""):
    """(path, text) of every scalar in an observation, and the JSON of every container after its
    items (a structured secret is found whole; a scalar one at its own path first)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
        yield path or "$", json.dumps(value, sort_keys=True)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]")
        yield path or "$", json.dumps(value, sort_keys=True)
    elif value is not None and not isinstance(value, bool):
        yield path or "$", str(value)


class Secrets:
    """What must not be shown for one task: labelled patterns."""

    def __init__(self, *, task: dict, hidden_fields, answers=()):
        visible = json.dumps({key: value for key, value in task.items() if key not in set(hidden_fields)}, sort_keys=True)
        visible = visible.casefold()
        self.patterns = []
        wanted = [(f"hidden field `{field}`", task[field]) for field in hidden_fields if field in task]
        wanted += [("the oracle's answer", answer) for answer in answers]
        seen = set()
        for label, value in wanted:
            pattern = pattern_of([text for text in texts_of(value) if not (pattern_of([text]).search(visible))])
            if pattern is not None and (label, pattern.pattern) not in seen:
                seen.add((label, pattern.pattern))
                self.patterns.append((label, pattern))

    def __bool__(self):
        return bool(self.patterns)

    def found_in(self, value):
        """(label, path) of each secret found in `value`, at the deepest path that holds it."""
        for label, pattern in self.patterns:
            for path, text in leaves(value):
                if pattern.search(text.casefold()):
                    yield label, path
                    break


def scan(items, secrets_for) -> dict:
    """items: {task_id, seed, where, rollout, value}; secrets_for(task_id, seed) -> Secrets."""
    hits, count, scanned, reported = [], 0, 0, set()
    for item in items:
        secrets = secrets_for(item["task_id"], item["seed"])
        if not secrets:
            continue
        scanned += 1
        for label, path in secrets.found_in(item["value"]):
            count += 1
            key = (item["task_id"], label, item["where"].split(" ")[0], path)
            if key in reported or len(hits) >= MAX_HITS:
                continue
            reported.add(key)
            hits.append({"task_id": item["task_id"], "seed": item["seed"], "secret": label, "where": item["where"],
                         "path": path, "rollout": item.get("rollout")})
    return {"scanned": scanned, "count": count, "hits": hits}


def leak_figures(*, audit) -> dict:
    """The leak scan over an audit's stored episodes (see the module's docstring)."""
    version = audit.environment_version
    manifest = version.manifest
    hidden = list(manifest.get("hidden_task_fields") or [])
    tasks = {str(task.get("id")): task for task in version.tasks}
    entries = list(audit.audit_runs.all())
    run_ids = [entry.run_id for entry in entries]
    oracle_runs = [entry.run_id for entry in entries if entry.role == AuditRole.ORACLE]
    noop_runs = [entry.run_id for entry in entries if entry.role == AuditRole.PROBE and entry.name == "noop"]
    answers: dict = {}
    if (manifest.get("kind") or "python") == "python" and oracle_runs:
        # The last action of each episode the oracle passed: its answer (browser answers are page text, not secrets).
        last = Step.objects.filter(rollout__run_id__in=oracle_runs, rollout__status=RolloutStatus.SUCCEEDED,
                                   index=F("rollout__step_count") - 1)
        for task_id, seed, action in last.values_list("rollout__task_id", "rollout__seed", "action"):
            answers.setdefault((task_id, seed), []).extend(oracle_answers(action))
    cache: dict = {}

    def secrets_for(task_id, seed):
        key = (task_id, seed)
        if key not in cache:
            task = tasks.get(str(task_id)) or {}
            found = answers.get(key) if seed is not None else [a for (t, _), values in answers.items() if t == task_id for a in values]
            cache[key] = Secrets(task=task, hidden_fields=hidden, answers=found or ())
        return cache[key]

    def items():
        rollouts = Rollout.objects.filter(run_id__in=run_ids).order_by("id")
        for rollout_id, task_id, seed, observation, info in rollouts.values_list(
                "id", "task_id", "seed", "initial_observation", "reset_info").iterator():
            yield {"task_id": task_id, "seed": seed, "where": "reset observation", "rollout": rollout_id, "value": observation}
            yield {"task_id": task_id, "seed": seed, "where": "reset info", "rollout": rollout_id, "value": info}
        steps = (Step.objects.filter(rollout__run_id__in=noop_runs, terminated=False, truncated=False)
                 .filter(index__lt=F("rollout__step_count") - 1).order_by("rollout_id", "index"))
        for rollout_id, task_id, seed, index, observation, info in steps.values_list(
                "rollout_id", "rollout__task_id", "rollout__seed", "index", "observation", "info").iterator():
            yield {"task_id": task_id, "seed": seed, "where": f"step {index} observation", "rollout": rollout_id, "value": observation}
            yield {"task_id": task_id, "seed": seed, "where": f"step {index} info", "rollout": rollout_id, "value": info}
        first = str(version.tasks[0].get("id")) if version.tasks else None
        for spec in (audit.interface or {}).get("tools") or []:
            name = (spec.get("function") or spec).get("name") if isinstance(spec, dict) else None
            yield {"task_id": first, "seed": None, "where": f"tool spec {name}", "rollout": None, "value": spec}
        if (manifest.get("kind") or "python") == "browser":
            for path, text in sorted((version.files or {}).items()):
                if path.startswith("site/") and isinstance(text, str):
                    for task_id in tasks:
                        yield {"task_id": task_id, "seed": None, "where": f"file {path}", "rollout": None, "value": text}

    return scan(items(), secrets_for)

