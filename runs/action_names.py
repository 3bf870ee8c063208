"""What a discrete action is called and which keyboard key plays it, for people (play and replay);
agents and the stored steps keep the numbers.

Names: the version's `[actions] names` (from the space's `start` on), else the names the environment's
action space gives (`"names"`, e.g. ALE's NOOP, FIRE, RIGHT, ... through `studio_sdk.named_space`).
Keys: the version's `[actions] keys` (a key -> an action's name or number), else the digit keys for
actions 0 to 9 and the arrow keys, space and "." for actions named UP, DOWN, LEFT, RIGHT, FIRE, NOOP.
"""

# At most this many actions are offered as buttons (larger spaces are typed as JSON).
BUTTONS_MAX = 32
# KeyboardEvent.key values by the names a manifest may use for them.
KEY_ALIASES = {"Space": " ", "Spacebar": " ", "Up": "ArrowUp", "Down": "ArrowDown", "Left": "ArrowLeft", "Right": "ArrowRight"}
DEFAULT_KEYS_BY_NAME = {"UP": "ArrowUp", "DOWN": "ArrowDown", "LEFT": "ArrowLeft", "RIGHT": "ArrowRight", "FIRE": " ", "NOOP": "."}
KEY_LABELS = {" ": "Space", "ArrowUp": "↑", "ArrowDown": "↓", "ArrowLeft": "←", "ArrowRight": "→"}


def discrete_actions(space) -> range | None:
    """The actions of a small discrete space (offered as buttons), None for any other space."""
    if not isinstance(space, dict) or space.get("type") != "discrete":
        return None
    n, start = space.get("n"), space.get("start", 0)
    if not isinstance(n, int) or not isinstance(start, int) or not 0 < n <= BUTTONS_MAX:
        return None
    return range(start, start + n)


def action_names(*, manifest: dict | None, action_space) -> dict[str, str]:
    """{"0": "NOOP", "1": "FIRE", ...}: the discrete actions' names by number (JSON keys), {} when they
    have none. `action_space` None (not known here, as in a replay): the manifest's names from 0."""
    space = action_space if isinstance(action_space, dict) else {}
    if space and space.get("type") != "discrete":
        return {}
    declared = ((manifest or {}).get("actions") or {}).get("names")
    names = list(declared or space.get("names") or [])
    start = space.get("start", 0) if isinstance(space.get("start", 0), int) else 0
    if isinstance(space.get("n"), int):
        names = names[: space["n"]]
    return {str(start + offset): str(name) for offset, name in enumerate(names)}


def rollout_action_names(rollout) -> dict[str, str]:
    """The names of a rollout's discrete actions ({"2": "UP", ...}; {} when unnamed): the ones its
    episode recorded at start, else its version's [actions] names (an episode still going)."""
    names = (rollout.reproduction or {}).get("action_names")
    if not names:
        names = action_names(manifest=rollout.run.environment_version.manifest, action_space=None)
    return names or {}


def action_label(action, names: dict[str, str]) -> str | None:
    """"UP (2)" for a discrete action that has a name, as the replay shows it (static/js/replay.js); None
    for any other action (shown as its JSON)."""
    if isinstance(action, bool) or not isinstance(action, (int, float)):
        return None
    if isinstance(action, float):
        if not action.is_integer():
            return None
        action = int(action)
    name = names.get(str(action))
    return f"{name} ({action})" if name is not None else None


def named_space(*, manifest: dict | None, action_space):
    """The action space description with `names` the actions' names as play and replay call them (the
    version's [actions] names over the space's own), for a discrete space that has any; any other
    space as it is. Only `names` changes: a client that reads type, n and start reads the same."""
    names = action_names(manifest=manifest, action_space=action_space)
    if not names or not isinstance(action_space, dict):
        return action_space
    start = action_space.get("start", 0) if isinstance(action_space.get("start", 0), int) else 0
    return {**action_space, "names": [names.get(str(start + offset), "") for offset in range(len(names))]}


def action_keys(*, manifest: dict | None, names: dict[str, str], actions: range) -> dict[str, int]:
    """{KeyboardEvent.key: action number} for play: the manifest's `[actions] keys`, else the defaults."""
    by_name = {name: int(value) for value, name in names.items()}
    declared = ((manifest or {}).get("actions") or {}).get("keys")
    keys: dict[str, int] = {}
    if declared:
        for key, action in declared.items():
            value = by_name.get(action) if isinstance(action, str) else action
            if value in actions:
                keys[KEY_ALIASES.get(key, key)] = value
        return keys
    for value in actions:
        if 0 <= value <= 9:
            keys[str(value)] = value
    for value, name in names.items():
        key = DEFAULT_KEYS_BY_NAME.get(name.upper())
        if key and key not in keys:
            keys[key] = int(value)
    return keys


def play_controls(*, manifest: dict | None, action_space) -> dict | None:
    """Play's controls for a small discrete space, None for any other: `buttons` ([{"value": 2, "name":
    "UP", "keys": "↑"}, ...]), `bound` (the buttons a key plays) and `keys` ({KeyboardEvent.key: value},
    for the page's keyboard)."""
    actions = discrete_actions(action_space)
    if actions is None:
        return None
    names = action_names(manifest=manifest, action_space=action_space)
    keys = action_keys(manifest=manifest, names=names, actions=actions)
    buttons = [
        {"value": value, "name": names.get(str(value), ""),
         "keys": " ".join(KEY_LABELS.get(key, key) for key, bound in keys.items() if bound == value)}
        for value in actions
    ]
    bound = [button for button in buttons if button["keys"]]
    return {"buttons": buttons, "keys": keys, "bound": bound, "start": actions.start}
