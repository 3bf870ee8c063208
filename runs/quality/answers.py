"""The answer probes (check `probe.answer`): answers a sound verifier must refuse, which the studio plays
itself on fresh episodes once the audit's runs have ended (replay.Replayer.play: one environment
sandbox for all of them, reset with each task and seed; nothing reads the package's files). A probe
agent in a one-shot episode gets one answer in; these get one answer of each kind into every instance.

- `shotgun`: one answer holding many candidates: every integer of a plausible range (the action space's,
  the answer schema's minimum..maximum, else 0..1000, and every number the task shows), every token of
  the task's visible fields and first observation, every enum and choice value; each set alone and all
  of them together;
- `perturb`: the oracle's episode with junk appended to every answer it gave ("87" -> "87 zq xylo 7";
  a list gets its last item again);
- `cross`: another task's oracle answer (the last action of an episode it passed whose answer differs
  from this instance's own), submitted on this task;
- `junk`: an answer that honours the action schema (format, pattern, enum, minimum/maximum, lengths: a
  date that is a date, a number in range) and differs from every answer known for the instance (the
  oracle's there and the hidden task fields): only instances with a known answer.

An answer goes where the oracle put its last one (its answering values replaced, leaks.oracle_answers's
rule), else into every argument of the answer tools, else as a bare answer and as {"answer": ...}. It
is sent up to REPEATS times (an episode that stays open after a wrong answer hears it again), then the
episode is verified. Not played: browser versions (their answers are page actions) and control
environments (a numeric action space, no tools, and an oracle whose actions answer nothing).

A probe's reward of an instance (task, seed) is the best verifier reward over its answers; the probe is
flagged (red) when its mean over instances is above its threshold (report.probe_threshold, as every
probe); a replay the sandbox failed is an amber finding.
"""
import json
import re

from ..models import RolloutStatus, Step
from .leaks import VERB_KEYS, oracle_answers
from .models import AuditRole
from .replay import Replayer
from .report import probe_threshold

ANSWER_PROBES = ("shotgun", "perturb", "cross", "junk")
JUNK = "zq xylo 7"
REPEATS = 3
DEFAULT_RANGE = (0, 1000)
MAX_RANGE = 5000  # integers in one shotgun answer
MAX_ANSWER_CHARS = 60_000
MAX_ITEMS = 100  # items of a junk array, repeats of a pattern's counted piece
CONTROL_SPACES = ("discrete", "box", "multi_discrete", "multi_binary")
ANSWER_TOOL_WORDS = ("submit", "answer", "guess", "finish", "done", "reply", "respond", "solve")
NO_JUNK = object()  # a schema the junk cannot honour
FORMATS = {
    "date": ["2001-02-03", "2002-03-04"], "date-time": ["2001-02-03T04:05:06Z", "2002-03-04T05:06:07Z"],
    "time": ["04:05:06", "05:06:07"], "email": ["junk@example.org", "lorem@example.org"],
    "uri": ["https://example.org/junk", "https://example.org/lorem"], "url": ["https://example.org/junk"],
    "uuid": ["12345678-1234-4123-8123-123456789abc", "87654321-4321-4321-8321-cba987654321"],
    "ipv4": ["192.0.2.1", "192.0.2.2"], "ipv6": ["2001:db8::1", "2001:db8::2"], "hostname": ["junk.example.org"],
}
WORDS = ["lorem ipsum dolor", "lorem", "ipsum"]


# -- where an answer goes -------------------------------------------------------------------------


def replaced(action, answer_for):
    """`action` with each answering value v replaced by answer_for(v), or None when it answers nothing
    (a bare number or array is a control)."""
    if isinstance(action, str):
        return answer_for(action)
    if not isinstance(action, dict):
        return None
    out, changed = {}, False
    for key, value in action.items():
        if key in VERB_KEYS or value is None or isinstance(value, bool):
            out[key] = value
        elif isinstance(value, dict):
            inner = replaced(value, answer_for)
            out[key] = value if inner is None else inner
            changed = changed or inner is not None
        else:
            out[key] = answer_for(value)
            changed = True
    return out if changed else None


def answer_tools(tools) -> list[dict]:
    """The tools an answer goes to: those named like one (submit, answer, guess...), else all."""
    specs = [spec.get("function") or spec for spec in tools or [] if isinstance(spec, dict)]
    named = [spec for spec in specs if any(word in str(spec.get("name", "")).lower() for word in ANSWER_TOOL_WORDS)]
    return (named or specs)[:3]


def properties_of(spec) -> dict:
    return (spec.get("parameters") or {}).get("properties") or {}


def shapes(value, *, template, tools) -> list:
    """The actions that submit `value`: in the oracle's shape, else the answer tools', else bare."""
    if template is not None:
        action = replaced(template, lambda _old: value)
        if action is not None:
            return [action]
    calls = [{"tool": spec.get("name"), "arguments": {name: value for name in properties_of(spec)} or {"answer": value}}
             for spec in answer_tools(tools)]
    return calls or [value, {"answer": value}]


# -- what an answer holds -------------------------------------------------------------------------


def words_of(value) -> list[str]:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return re.findall(r"[^\s,;:!?()\[\]{}\"']+", text)


def schema_leaves(schema):
    """Every sub-schema of a JSON schema (properties, items)."""
    if not isinstance(schema, dict):
        return
    yield schema
    for sub in (schema.get("properties") or {}).values():
        yield from schema_leaves(sub)
    yield from schema_leaves(schema.get("items"))


def plausible_range(*, space, tools, seen: list[int]) -> tuple[int, int]:
    if isinstance(space, dict) and space.get("type") == "discrete" and isinstance(space.get("n"), int):
        start = int(space.get("start", 0))
        return start, start + min(space["n"], MAX_RANGE) - 1
    for spec in answer_tools(tools):
        for schema in schema_leaves(spec.get("parameters")):
            if schema.get("type") == "integer" and "minimum" in schema and "maximum" in schema:
                low = int(schema["minimum"])
                return low, min(int(schema["maximum"]), low + MAX_RANGE - 1)
    low, high = DEFAULT_RANGE
    if seen:
        low, high = min(low, min(seen)), max(high, 10 * max(abs(number) for number in seen))
    return low, min(high, low + MAX_RANGE - 1)


def shotgun_sets(*, visible: dict, observation, space, tools) -> dict[str, str]:
    """Answers holding many candidates: {set name: the answer}."""
    words = list(dict.fromkeys(words_of(list(visible.values())) + words_of(observation)))
    seen = [int(word) for word in words if re.fullmatch(r"-?\d{1,9}", word)]
    low, high = plausible_range(space=space, tools=tools, seen=seen)
    integers = list(dict.fromkeys([str(number) for number in range(low, high + 1)] + [str(number) for number in seen]))
    choices = []
    for spec in tools or []:
        for schema in schema_leaves((spec.get("function") or spec).get("parameters")):
            choices.extend(str(value) for value in schema.get("enum") or [])
    if isinstance(space, dict) and space.get("type") == "choice":
        for value in space.get("values") or []:
            choices.extend(str(answer) for answer in (oracle_answers(value) if isinstance(value, dict) else [value]))
    sets = {"integers": integers, "tokens": words, "choices": list(dict.fromkeys(choices))}
    sets = {name: " ".join(values)[:MAX_ANSWER_CHARS] for name, values in sets.items() if values}
    if len(sets) > 1:
        sets["all"] = " ".join(sets.values())[:MAX_ANSWER_CHARS]
    return sets


def perturbed(value):
    """The value with junk appended: text and numbers get words after them, a list its last item again."""
    if isinstance(value, list):
        return value + value[-1:] if value else [JUNK]
    return f"{value} {JUNK}"


# A token of a simple regular expression: an escape, a class, a counted repeat, an operator, a character.
PATTERN_TOKEN = re.compile(r"\\.|\[(?:\\.|[^\]])+\]|\{\d+(?:,\d*)?\}|.")


def pattern_char(token: str, pick: int) -> str:
    """One character that `token` (an escape, a class, a literal) matches; `pick` chooses another."""
    classes = {r"\d": "07", r"\w": "ab", r"\s": "  "}
    if token in classes:
        return classes[token][pick]
    if token.startswith("\\"):
        return token[1]
    if token.startswith("["):
        members = token[1:-1]
        if members.startswith("^"):
            return "Qq"[pick]
        if members[:2] in classes:
            return classes[members[:2]][pick]
        if pick and len(members) >= 3 and members[1] == "-":
            return members[2]
        return members[0] if not pick else members[-1]
    return "x" if token == "." else token


def pattern_example(pattern: str, avoid: set) -> str | None:
    """A short string a simple regular expression matches (its first alternative, one of each repeat,
    counted repeats counted), checked against the expression itself; None when none is found."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None
    for pick in (0, 1):
        pieces = []
        for token in PATTERN_TOKEN.findall(pattern):
            if token == "|":
                break
            if token in "^$()+":
                continue
            if token in "*?":
                if pieces:
                    pieces.pop()
                continue
            if token.startswith("{") and token.endswith("}"):
                if pieces:
                    pieces[-1] *= min(int(token[1:-1].split(",")[0]), MAX_ITEMS)
                continue
            pieces.append(pattern_char(token, pick))
        text = "".join(pieces)
        if compiled.search(text) and text.casefold() not in avoid:
            return text
    return None


def number_in(value):
    """A schema keyword's number, or None (absent, or not a number: a draft-4 boolean, a typo)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def unhonoured(value) -> bool:
    """Whether a built value holds NO_JUNK anywhere (a part the junk could not honour)."""
    if value is NO_JUNK:
        return True
    if isinstance(value, dict):
        return any(unhonoured(item) for item in value.values())
    if isinstance(value, list):
        return any(unhonoured(item) for item in value)
    return False


def junk_value(schema, *, avoid: set, space=None):
    """A value that honours `schema` and is none of `avoid` (case-folded texts); NO_JUNK if none found."""
    schema = schema if isinstance(schema, dict) else {}

    def fresh(candidates):
        return next((value for value in candidates if value is not None and str(value).casefold() not in avoid), NO_JUNK)

    if "enum" in schema:
        return fresh(schema["enum"])
    if "const" in schema:
        return NO_JUNK
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), None)
    if kind in ("integer", "number"):
        low, high = number_in(schema.get("minimum")), number_in(schema.get("maximum"))
        if low is None and number_in(schema.get("exclusiveMinimum")) is not None:
            low = schema["exclusiveMinimum"] + 1
        if high is None and number_in(schema.get("exclusiveMaximum")) is not None:
            high = schema["exclusiveMaximum"] - 1
        if low is None and high is None and isinstance(space, dict) and space.get("type") == "discrete":
            low = int(space.get("start", 0))
            high = low + int(space.get("n", 1)) - 1
        candidates = [low, high, 0, 1, 7, 13]
        if low is not None and high is not None:
            candidates = [low, high, (low + high) // 2, low + 1, high - 1]
        in_range = [value for value in candidates if value is not None
                    and (low is None or value >= low) and (high is None or value <= high)]
        value = fresh(in_range)
        return value if value is NO_JUNK or kind == "integer" else float(value)
    if kind == "boolean":
        return fresh([False, True])
    if kind == "null":
        return None
    if kind == "array":
        item = junk_value(schema.get("items"), avoid=avoid, space=space)
        count = min(max(number_in(schema.get("minItems")) or 1, 1), MAX_ITEMS)
        if number_in(schema.get("maxItems")) is not None:
            count = min(count, int(schema["maxItems"]))
        return NO_JUNK if item is NO_JUNK else [item] * count
    if kind == "object":
        values = {name: junk_value(sub, avoid=avoid, space=space) for name, sub in (schema.get("properties") or {}).items()}
        return NO_JUNK if any(value is NO_JUNK for value in values.values()) else values
    if schema.get("format") in FORMATS:
        return fresh(FORMATS[schema["format"]])
    if schema.get("pattern"):
        return pattern_example(str(schema["pattern"]), avoid) or NO_JUNK
    low, high = min(int(number_in(schema.get("minLength")) or 0), MAX_ANSWER_CHARS), number_in(schema.get("maxLength"))
    words = [(word * (low // len(word) + 1))[:max(low, len(word))] for word in WORDS]
    return fresh([word[:int(high)] if high is not None else word for word in words])


def junk_actions(*, template, space, tools, avoid: set) -> list:
    """Schema-valid junk in each answer tool (the oracle's tool first), else in the oracle's shape or the space."""
    actions = []
    specs = answer_tools(tools)
    if isinstance(template, dict) and template.get("tool"):
        specs = sorted(specs, key=lambda spec: spec.get("name") != template["tool"])
    for spec in specs[:2]:
        arguments = junk_value(spec.get("parameters") or {"type": "object"}, avoid=avoid, space=space)
        if arguments is not NO_JUNK:
            actions.append({"tool": spec.get("name"), "arguments": arguments})
    if actions:
        return actions
    if isinstance(space, dict) and space.get("type") == "choice":
        values = [value for value in space.get("values") or []
                  if not {str(answer).casefold() for answer in oracle_answers(value)} & avoid]
        return values[:1]
    if template is not None:
        action = replaced(template, lambda old: junk_value({"type": "integer" if isinstance(old, int) else "string"}, avoid=avoid, space=space))
        if action is not None and not unhonoured(action):
            return [action]
    text_space = space is None or (isinstance(space, dict) and space.get("type") == "text")
    return [WORDS[0]] if text_space and WORDS[0] not in avoid else []


# -- the probes over an audit ---------------------------------------------------------------------


def answers_of(action) -> set[str]:
    return {str(value).casefold() for value in oracle_answers(action)}


def oracle_episodes(audit) -> dict:
    """(task_id, seed) -> the actions of the first episode the oracle passed there."""
    runs = [entry.run_id for entry in audit.audit_runs.all() if entry.role == AuditRole.ORACLE]
    steps = (Step.objects.filter(rollout__run_id__in=runs, rollout__status=RolloutStatus.SUCCEEDED)
             .order_by("rollout_id", "index").values_list("rollout_id", "rollout__task_id", "rollout__seed", "action", "info"))
    episodes, owner = {}, {}
    for rollout_id, task_id, seed, action, info in steps.iterator():
        if isinstance(info, dict) and "agent_error" in info:
            continue
        key = (str(task_id), seed)
        if owner.setdefault(key, rollout_id) == rollout_id:
            episodes.setdefault(key, []).append(action)
    return episodes


def not_applicable(version, interface: dict, episodes: dict) -> str:
    """Why the answer probes do not apply to this version ("" when they do)."""
    if (version.manifest.get("kind") or "python") != "python":
        return "a browser version's answers are page actions"
    space = interface.get("action_space")
    answering = any(oracle_answers(actions[-1]) for actions in episodes.values() if actions)
    if not interface.get("tools") and isinstance(space, dict) and space.get("type") in CONTROL_SPACES and not answering:
        return "its actions are controls (a numeric action space, no tools, no answer in the oracle's actions)"
    return ""


def short(action, limit=200) -> str:
    text = action if isinstance(action, str) else json.dumps(action, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def example_of(action) -> str:
    """What the answer said, for a card line: its answering value, short, without backticks."""
    values = oracle_answers(action) if isinstance(action, dict) else [action]
    value = values[0] if len(values) == 1 else action
    return short(value, 80).replace("`", "'")


def answer_probes(*, audit) -> dict:
    """Play every answer probe over the audit's tasks and seeds (see the module's docstring)."""
    version = audit.environment_version
    manifest = version.manifest
    interface = audit.interface or {}
    episodes = oracle_episodes(audit)
    why_not = not_applicable(version, interface, episodes)
    if why_not:
        return {"applies": False, "why_not": why_not, "probes": []}
    hidden = list(manifest.get("hidden_task_fields") or [])
    tasks = list(version.tasks)
    limit = min(int(manifest.get("max_steps") or REPEATS), REPEATS)
    outcomes = {name: [] for name in ANSWER_PROBES}
    skipped = {name: "" for name in ANSWER_PROBES}
    with Replayer(version) as replayer:
        for task in tasks:
            task_id = str(task.get("id"))
            visible = {key: value for key, value in task.items() if key not in set(hidden) | {"id", "difficulty", "split"}}
            for seed in audit.seeds:
                own = episodes.get((task_id, seed))
                template = own[-1] if own else next((actions[-1] for (t, _), actions in episodes.items() if t == task_id), None)
                avoid = (answers_of(own[-1]) if own else set()) | {str(task[field]).casefold() for field in hidden if field in task}
                plays = {name: [] for name in ANSWER_PROBES}

                def shotgun(observation, space, tools, template=template, visible=visible):
                    return [action for answer in shotgun_sets(visible=visible, observation=observation, space=space, tools=tools).values()
                            for action in shapes(answer, template=template, tools=tools)]

                plays["shotgun"] = [shotgun]
                if own and any(replaced(action, perturbed) is not None for action in own):
                    plays["perturb"] = [[replaced(action, perturbed) or action for action in own]]
                if own and answers_of(own[-1]):
                    foreign = sorted(((t, s), actions[-1]) for (t, s), actions in episodes.items()
                                     if t != task_id and actions and answers_of(actions[-1]) and answers_of(actions[-1]) != answers_of(own[-1]))
                    foreign.sort(key=lambda item: item[0][1] != seed)
                    if foreign:
                        plays["cross"] = [[foreign[0][1]] * limit]
                if avoid:
                    def junk(observation, space, tools, template=template, avoid=avoid):
                        return junk_actions(template=template, space=space, tools=tools, avoid=avoid)
                    plays["junk"] = [junk]
                for name, entries in plays.items():
                    if entries:
                        outcomes[name].append(play_instance(replayer, task_id=task_id, seed=seed, entries=entries, limit=limit))
    if len(tasks) < 2:
        skipped["cross"] = "one task: no other task's answer to submit"
    elif not outcomes["cross"]:
        skipped["cross"] = "no two tasks with different oracle answers"
    if not outcomes["perturb"]:
        skipped["perturb"] = "no episode the oracle passed with an answer in it"
    if not outcomes["junk"]:
        skipped["junk"] = "no instance with a known answer (the oracle's, or a hidden task field)"
    return {"applies": True, "why_not": "", "probes": [
        probe_summary(name, outcomes[name], threshold=probe_threshold(manifest, name), skipped=skipped[name])
        for name in ANSWER_PROBES]}


def play_instance(replayer, *, task_id, seed, entries, limit) -> dict:
    """Play each answer of one instance: `entries` are action lists, or callables that make a list of
    actions, each action then its own episode (a list: one episode). The best verifier reward wins."""
    best = {"task_id": task_id, "seed": seed, "reward": None, "reason": "", "answer": None, "errors": []}
    for entry in entries:
        if callable(entry):
            made = {}

            def first(observation, space, tools, entry=entry):
                made["actions"] = entry(observation, space, tools)
                return [made["actions"][0]] * limit if made["actions"] else []

            episodes = [replayer.play(task_id=task_id, seed=seed, actions=first)]
            actions = made.get("actions") or []
            for action in actions[1:]:
                episodes.append(replayer.play(task_id=task_id, seed=seed, actions=lambda *_, action=action: [action] * limit))
            played = list(zip(actions, episodes))
        else:
            played = [(entry[-1], replayer.play(task_id=task_id, seed=seed, actions=lambda *_, entry=entry: entry))]
        for action, outcome in played:
            if outcome.error:
                best["errors"].append(outcome.error)
                continue
            reward = outcome.reward if outcome.reward is not None else 0.0
            if best["reward"] is None or reward > best["reward"]:
                best.update(reward=reward, reason=outcome.reason, answer=action)
    return best


def probe_summary(name: str, instances: list[dict], *, threshold: float, skipped: str = "") -> dict:
    judged = [instance for instance in instances if instance["reward"] is not None]
    rewards = [instance["reward"] for instance in judged]
    mean = round(sum(rewards) / len(rewards), 4) if rewards else None
    passing = sorted((instance for instance in judged if instance["reward"] > 0), key=lambda instance: -instance["reward"])
    errors = [{"task_id": instance["task_id"], "seed": instance["seed"], "error": instance["errors"][0]}
              for instance in instances if instance["errors"]]
    example = passing[0] if passing else None
    return {
        "name": name, "instances": len(judged), "passed": len(passing), "mean_reward": mean, "threshold": threshold,
        "flagged": mean is not None and mean > threshold, "skipped": skipped if not instances else "",
        "example": {"task_id": example["task_id"], "seed": example["seed"], "answer": short(example["answer"]),
                    "said": example_of(example["answer"]), "reason": str(example["reason"])[:200]} if example else None,
        "errors": errors[:20],
    }
