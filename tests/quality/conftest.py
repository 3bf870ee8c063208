"""Quality-lab fixtures: versions of the demo packages and of the deliberately flawed variants
of guess-number and the quiz (tests/quality/packages: `guess_claim` trusts a claim, `guess_clock` reads the
clock, `guess_farm` pays every step, `guess_cliff` hides odd seeds' secrets out of range,
`guess_backwards` declares its easiest task hardest, `quiz_trusts_report` believes a report file the agent can
write (over the clean `scratch_quiz`), `quiz_leak` shows
its answer; one-answer quizzes that believe a success flag (`quiz_success_flag`), accept a list of numbers
(`quiz_any_number`), read the first number (`quiz_first_number`), check the answer key (`quiz_answer_key`)
or the format (`quiz_format`)), a quiz whose verifier rolls dice (`quiz_dice_verifier`), quizzes that depend on
hash order (`quiz_hash_order`) or the local time zone (`quiz_local_time`), and the clean controls `arithmetic_quiz` and `sorting`.
A variant is the demo's files with the variant's own (environment.toml, variant.py) laid over them."""
import tomllib
from pathlib import Path

import pytest

from environments import services as env_services
from environments.demo import DEMO_DIR, read_folder

PACKAGES = Path(__file__).resolve().parent / "packages"
VARIANT_OF = {"guess_claim": "guess_number", "guess_clock": "guess_number", "guess_farm": "guess_number",
              "guess_cliff": "guess_number", "guess_backwards": "guess_number", "quiz_trusts_report": "scratch_quiz", "quiz_leak": "arithmetic_quiz", "quiz_success_flag": "arithmetic_quiz",
              "quiz_any_number": "arithmetic_quiz", "quiz_first_number": "arithmetic_quiz", "quiz_answer_key": "arithmetic_quiz",
              "quiz_format": "arithmetic_quiz", "quiz_dice_verifier": "arithmetic_quiz", "quiz_hash_order": "arithmetic_quiz",
              "quiz_local_time": "arithmetic_quiz"}


def base_folder(name: str) -> Path:
    """A demo package, or a package of this folder (the clean controls)."""
    return PACKAGES / name if (PACKAGES / name / "env.py").exists() else DEMO_DIR / name


def version_of(team, actor, folder: Path, slug: str, *, extra: dict | None = None):
    files = read_folder(folder) | (extra or {})
    kind = tomllib.loads(files["environment.toml"]).get("kind", "python")
    env = env_services.environment_create(team=team, actor=actor, name=slug, slug=slug, kind=kind, files=files)
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


@pytest.fixture
def make_version(team, owner):
    """make_version("guess_claim" | a demo package name, slug=..., extra={path: text}) -> a version."""

    def make(name: str, *, slug: str | None = None, extra: dict | None = None):
        variant = read_folder(PACKAGES / name) if name in VARIANT_OF else {}
        return version_of(team, owner, base_folder(VARIANT_OF.get(name, name)), slug or name.replace("_", "-"),
                          extra=variant | (extra or {}))

    return make
