#!/usr/bin/env python3
"""studio-env: play one episode of a studio environment from a shell, inside a Harbor task's container.

Shipped (as text, never imported by the studio) into every Harbor task the studio exports. The episode
is its action log: each command replays reset(task, seed) and every logged action, so the state needs
no process kept alive between commands and the verifier replays the very same episode.

    studio-env start              reset; prints the first observation (and the tools, if any)
    studio-env step '<json>'      one action (JSON: a number, a list, or {"tool": ..., "arguments": {...}})
    studio-env status             the episode so far
    studio-env verify --task T --reward R   (tests/test.sh) replay with the full task, judge, write the reward

Standard library only, beside the environment's own package and the studio SDK in this folder.
"""
import argparse
import importlib
import json
import os
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "package"
LOG_DIR = Path(os.environ.get("STUDIO_EPISODE_DIR", "/logs/agent/studio"))
LOG = LOG_DIR / "actions.jsonl"


def _manifest() -> dict:
    return tomllib.loads((PACKAGE / "environment.toml").read_text(encoding="utf-8"))


def _environment(manifest: dict):
    sys.path[:0] = [str(HERE), str(PACKAGE)]
    os.chdir(PACKAGE)
    entrypoint = manifest["entrypoint"]
    if entrypoint.startswith("gymnasium:"):
        from studio_sdk import GymnasiumEnvironment

        return GymnasiumEnvironment(entrypoint.split(":", 1)[1])
    module_name, _, class_name = entrypoint.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def _jsonable(value):
    from studio_sdk import jsonable

    return jsonable(value)


def _actions() -> list:
    if not LOG.exists():
        return []
    return [json.loads(line) for line in LOG.read_text(encoding="utf-8").splitlines() if line.strip()]


def _replay(task_path: Path, actions: list):
    """(env, first observation, [(observation, reward, terminated, truncated, info)]) after the actions."""
    spec = json.loads(task_path.read_text(encoding="utf-8"))
    env = _environment(_manifest())
    first = env.reset(spec["task"], spec["seed"])
    results = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        results.append((observation, float(reward), bool(terminated), bool(truncated), info))
    return env, first, results


def _print(value) -> None:
    print(json.dumps(_jsonable(value), ensure_ascii=False, indent=2))


def command_start(_args) -> int:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    LOG.write_text("", encoding="utf-8")
    env, first, _ = _replay(HERE / "task.json", [])
    out = {"observation": first}
    if getattr(env, "tools", None):
        out["tools"] = env.tools
    _print(out)
    return 0


def command_step(args) -> int:
    try:
        action = json.loads(args.action)
    except ValueError as error:
        print(f"the action must be JSON: {error}", file=sys.stderr)
        return 2
    actions = _actions()
    max_steps = int(_manifest().get("max_steps", 200))
    _, _, results = _replay(HERE / "task.json", actions)
    if results and (results[-1][2] or results[-1][3]):
        print("the episode is over: run `studio-env start` to begin again", file=sys.stderr)
        return 2
    if len(actions) >= max_steps:
        print(f"the episode is over: max_steps ({max_steps}) reached", file=sys.stderr)
        return 2
    _, _, results = _replay(HERE / "task.json", [*actions, action])
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps(action, ensure_ascii=False) + "\n")
    observation, reward, terminated, truncated, info = results[-1]
    _print({"observation": observation, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info})
    return 0


def command_status(_args) -> int:
    actions = _actions()
    _, _, results = _replay(HERE / "task.json", actions)
    _print({"steps": len(actions), "total_reward": sum(r[1] for r in results),
            "over": bool(results and (results[-1][2] or results[-1][3]))})
    return 0


def command_verify(args) -> int:
    """The reward of the logged episode: verify() when the environment has one, else the total reward."""
    reward_path = Path(args.reward)
    reward_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        env, _, results = _replay(Path(args.task), _actions())
        verify = getattr(env, "verify", None)
        verdict = verify() if callable(verify) else None
        if verdict is None:
            reward, reason = sum(r[1] for r in results), "no verifier: the episode's total reward"
        else:
            reward, reason = float(verdict[0]), str(verdict[1])
    except Exception as error:  # the agent's episode could not be replayed or judged: reward 0, reason kept
        reward, reason = 0.0, f"{type(error).__name__}: {error}"
    reward_path.write_text(f"{reward:g}\n", encoding="utf-8")
    (reward_path.parent / "reason.txt").write_text(reason + "\n", encoding="utf-8")
    print(f"reward {reward:g}: {reason}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="studio-env", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("start").set_defaults(run=command_start)
    step = commands.add_parser("step")
    step.add_argument("action")
    step.set_defaults(run=command_step)
    commands.add_parser("status").set_defaults(run=command_status)
    verify = commands.add_parser("verify")
    verify.add_argument("--task", required=True)
    verify.add_argument("--reward", required=True)
    verify.set_defaults(run=command_verify)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
