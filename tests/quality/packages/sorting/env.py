"""A clean sorting task (a quality-lab control: every check stays green): put the shown numbers in
ascending order by their positions; the hidden `solution` is the sorted list. Three tries."""

from studio_sdk import Environment, tool

TRIES = 3


def parse_order(action):
    """Positions from [2, 0, 1], {"order": [...]} or a tool call {"tool": "submit_order", "arguments": {"order": [...]}}."""
    if isinstance(action, dict):
        action = action.get("arguments", action)
        action = action.get("order") if isinstance(action, dict) else None
    if isinstance(action, list) and all(isinstance(item, int) and not isinstance(item, bool) for item in action):
        return action
    return None


class Sorting(Environment):
    tools = [tool("submit_order", "Submit the positions of the numbers, smallest first.",
                  {"type": "object", "properties": {"order": {"type": "array", "items": {"type": "integer"}}}, "required": ["order"]})]

    def reset(self, task, seed):
        self.items, self.solution = list(task["items"]), list(task["solution"])
        self.action_space = {"type": "multi_discrete", "nvec": [len(self.items)] * len(self.items)}
        self.tries, self.right = 0, False
        shown = ", ".join(f"{position}: {value}" for position, value in enumerate(self.items))
        return f"Give the positions of these numbers in ascending order of value. {shown}"

    def step(self, action):
        self.tries += 1
        order = parse_order(action)
        valid = order is not None and sorted(order) == list(range(len(self.items)))
        self.right = valid and [self.items[position] for position in order] == self.solution
        done = self.right or self.tries >= TRIES
        return ("sorted" if self.right else "not sorted" + (", try again" if not done else "")), 1.0 if self.right else 0.0, done, False, {}

    def verify(self):
        return (1.0, "sorted") if self.right else (0.0, f"not sorted in {self.tries} tries")
