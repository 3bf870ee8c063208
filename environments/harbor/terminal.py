"""The studio environment of an imported Harbor task: its environment.toml and env.py (package text).

The agent gets a shell (`bash`) in a scratch folder standing in for the container's /app, and `finish`.
The verifier runs the task's own tests/test.sh with Harbor's absolute folders (/app, /tests, /logs,
/solution) pointed at the scratch folder, and reads /logs/verifier/reward.txt (or reward.json) as
Harbor does. The Dockerfile is not built: commands run with what the sandbox has.
"""
import json


def manifest(*, name: str) -> str:
    return (
        f"name = {json.dumps(name, ensure_ascii=False)}\n"
        'kind = "python"\n'
        'entrypoint = "env:HarborTask"\n'
        "max_steps = 50\n"
        # Harbor tasks carry their instruction in the task: nothing in it is a hidden answer.
        "hidden_task_fields = []\n\n"
        "[limits]\nstep_timeout_s = 60\nepisode_timeout_s = 1800\nverify_timeout_s = 600\nmemory_mb = 1024\n"
    )


ENV_PY = r'''"""A Harbor task played in the studio: a shell in a scratch folder, the task's tests/test.sh as its verifier.

Imported from a Harbor task folder, kept verbatim under harbor/<task>/. Harbor builds
environment/Dockerfile and runs the agent in that container; here commands run in the sandbox with
what it has (no image is built, no network), so a task whose tests need packages the sandbox lacks
scores 0 with the script's output as the reason.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from studio_sdk import Environment, tool

HERE = Path(__file__).resolve().parent
OUTPUT_CHARS = 8000
# Harbor's absolute folders inside its container, pointed at this episode's scratch folder.
HARBOR_PATHS = re.compile(r"(?<![\w.])/(app|tests|logs|solution)(?=/|\b|$)")


class HarborTask(Environment):
    tools = [
        tool("bash", "Run a shell command in the task's working folder; returns its exit code and output.",
             {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        tool("finish", "Say the task is done: its tests then judge the working folder.",
             {"type": "object", "properties": {}}),
    ]

    def reset(self, task, seed):
        self.task = task
        self.root = Path(tempfile.mkdtemp(prefix="harbor-"))
        for folder in ("app", "logs/verifier", "logs/agent"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        return {"instruction": task["instruction"], "working_folder": "/app"}

    def _shell(self, script, *, timeout):
        shell = shutil.which("bash") or shutil.which("sh")
        if shell is None:
            return 127, "no shell in this sandbox"
        script = HARBOR_PATHS.sub(lambda m: str(self.root / m.group(1)), script)
        try:
            done = subprocess.run([shell, "-c", script], cwd=self.root / "app", capture_output=True, text=True,
                                  timeout=timeout, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                        "HOME": str(self.root), "TMPDIR": str(self.root)})
        except subprocess.TimeoutExpired:
            return 124, f"timed out after {timeout} s"
        return done.returncode, (done.stdout + done.stderr)[-OUTPUT_CHARS:]

    def step(self, action):
        name = action.get("tool") if isinstance(action, dict) else None
        arguments = action.get("arguments") if isinstance(action, dict) else None
        if name == "finish":
            return {"finished": True}, 0.0, True, False, {}
        if name != "bash" or not isinstance(arguments, dict) or not isinstance(arguments.get("command"), str):
            return {"error": "call bash with a command, or finish"}, 0.0, False, False, {}
        code, output = self._shell(arguments["command"], timeout=50)
        return {"exit_code": code, "output": output}, 0.0, False, False, {}

    def verify(self):
        source = HERE / self.task["harbor_dir"] / "tests"
        tests = self.root / "tests"
        shutil.rmtree(tests, ignore_errors=True)
        shutil.copytree(source, tests)
        script = (tests / "test.sh").read_text(encoding="utf-8")
        code, output = self._shell(script, timeout=500)
        verifier = self.root / "logs" / "verifier"
        tail = output.strip().splitlines()[-3:]
        if (verifier / "reward.txt").exists():
            text = (verifier / "reward.txt").read_text().strip()
        elif (verifier / "reward.json").exists():
            rewards = json.loads((verifier / "reward.json").read_text() or "{}")
            text = str(rewards.get("reward", next(iter(rewards.values()), 0)))
        else:
            return 0.0, f"tests/test.sh (exit {code}) wrote no reward: " + " / ".join(tail)
        try:
            reward = float(text)
        except ValueError:
            return 0.0, f"tests/test.sh wrote a reward that is not a number: {text[:80]!r}"
        return reward, f"tests/test.sh (exit {code}): reward {reward:g}" + (": " + " / ".join(tail) if tail else "")
'''
