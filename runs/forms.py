"""The forms of the runs pages: agents, New run and play's start."""
from django import forms

from environments.package import LIMIT_MAXIMA

from .agents import VERSION_AGENT, version_agent_file
from .models import AgentKind
from .seeds import SEED_MAX, SEEDS_HELP, parse_seeds


class AgentForm(forms.Form):
    """One form for every agent kind; the page shows the fields of the chosen kind."""

    name = forms.CharField(max_length=120)
    kind = forms.ChoiceField(choices=[
        (AgentKind.SCRIPTED, "Scripted (Python act function)"),
        (AgentKind.OPENAI, "Model behind an OpenAI-compatible API"),
        (AgentKind.RANDOM, "Random"),
    ], widget=forms.Select(attrs={"data-agent-kind": "1"}))
    code = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 14, "id": "code", "data-mode": "python", "data-kind": "scripted"}), required=False,
        initial='def reset(task, seed):\n    pass\n\n\ndef act(observation, info):\n    return 0\n',
        help_text="A scripted agent defines act(observation, info) -> action, and optionally reset(task, seed).",
    )
    base_url = forms.CharField(required=False, label="Base URL", widget=forms.TextInput(attrs={"data-kind": "openai", "placeholder": "http://host:8000/v1"}))
    model = forms.CharField(required=False, widget=forms.TextInput(attrs={"data-kind": "openai", "placeholder": "e.g. Qwen/Qwen2.5-7B-Instruct"}))
    api_key = forms.CharField(
        required=False, label="API key", widget=forms.PasswordInput(render_value=False, attrs={"data-kind": "openai", "autocomplete": "off"}),
        help_text="Stored as a secret: never shown again, never sent to the sandbox.",
    )
    temperature = forms.FloatField(required=False, min_value=0, max_value=2, initial=0, widget=forms.NumberInput(attrs={"data-kind": "openai", "step": "0.1"}))
    max_tokens = forms.IntegerField(required=False, min_value=1, initial=1024, widget=forms.NumberInput(attrs={"data-kind": "openai"}))
    max_turns = forms.IntegerField(required=False, min_value=1, initial=30, label="Turn limit", widget=forms.NumberInput(attrs={"data-kind": "openai"}))
    system_prompt = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 4, "data-kind": "openai"}),
        help_text="Optional; placeholders {task}, {task_id} and {tools} are filled in.",
    )

    MODEL_FIELDS = ("base_url", "model", "temperature", "max_tokens", "max_turns", "system_prompt")

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        kwargs = {"name": data["name"], "kind": data["kind"]}
        if data["kind"] == AgentKind.SCRIPTED:
            kwargs["code"] = data["code"]
        elif data["kind"] == AgentKind.OPENAI:
            kwargs["config"] = {k: data[k] for k in self.MODEL_FIELDS if data.get(k) not in (None, "")}
            kwargs["api_key"] = data.get("api_key") or ""
        return kwargs


class RunForm(forms.Form):
    agent = forms.ChoiceField()
    tasks = forms.CharField(
        initial="all", required=False,
        help_text="all, task ids separated by commas (t1,t2), or curriculum:learnable (also :uniform, :ladder) to let"
                  " the studio pick each rollout's task from the agent's statistics as it is dispatched."
    )
    count = forms.IntegerField(min_value=1, max_value=10_000, required=False, help_text="Curriculum runs: how many rollouts.")
    difficulties = forms.CharField(required=False, help_text="Optional: only tasks of these difficulties, e.g. 1,2.")
    seeds = forms.CharField(initial="0-4", help_text=SEEDS_HELP)
    repeats = forms.IntegerField(min_value=1, max_value=100, initial=1)
    max_steps = forms.IntegerField(min_value=1, max_value=LIMIT_MAXIMA["max_steps"], required=False, help_text="Default: the manifest's max_steps.")
    episode_timeout_s = forms.FloatField(min_value=0.1, max_value=LIMIT_MAXIMA["episode_timeout_s"], required=False, label="Episode timeout (seconds)", help_text="Default: the manifest's limits.episode_timeout_s.")
    reviews_required = forms.IntegerField(min_value=1, max_value=10, initial=1, help_text="Independent reviews per rollout.")

    def __init__(self, *args, agents=(), version=None, **kwargs):
        """`version`: the chosen one, whose own agent is offered by its file's name (and not at all when
        it ships none); without one, the choice is offered and the run's start checks it (an error beside
        the field, as when the form asks it of a version that ships none)."""
        super().__init__(*args, **kwargs)
        choices = [("random", "Random (built in)")]
        shipped = version_agent_file(version) if version is not None else "agent.py"
        if shipped:
            choices.append((VERSION_AGENT, f"This version's agent ({shipped}, scripted)"))
        elif self.data.get("agent") == VERSION_AGENT:
            choices.append((VERSION_AGENT, "This version's agent (it ships none)"))
        self.fields["agent"].choices = choices + [(str(a.pk), f"{a.name} ({a.kind})") for a in agents]

    def clean_seeds(self):
        try:
            return parse_seeds(self.cleaned_data["seeds"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_difficulties(self):
        text = (self.cleaned_data.get("difficulties") or "").strip()
        if not text:
            return None
        try:
            return sorted({int(x) for x in text.replace(" ", "").split(",") if x})
        except ValueError:
            raise forms.ValidationError("Difficulties are whole numbers separated by commas, e.g. 1,2.") from None

    def clean_tasks(self):
        text = (self.cleaned_data.get("tasks") or "all").strip()
        if text in ("", "all"):
            return "all"
        if text.startswith("curriculum"):
            return text
        return [t.strip() for t in text.split(",") if t.strip()]


class PlayForm(forms.Form):
    """Play's start: the task and seed, each refused beside its field (a seed beyond int64 included)."""

    task_id = forms.CharField(max_length=200)
    seed = forms.IntegerField(min_value=0, max_value=SEED_MAX, initial=0, required=False)

    def clean_seed(self):
        return self.cleaned_data["seed"] or 0
