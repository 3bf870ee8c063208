"""Export fixtures: the stand-in model and model agents (tests/agents), bulk runs (tests/review), a
version of the inventory demo that maps a text answer to its submit tool, and an offline datasets cache."""
import pytest

from environments import services as env_services
from environments.demo import DEMO_DIR, read_folder
from tests.agents.conftest import inventory, model_agent, model_server  # noqa: F401 - fixtures
from tests.review.conftest import make_run, version  # noqa: F401 - fixtures


@pytest.fixture
def inventory_text_answer(team, owner):
    """inventory_tools whose environment.toml declares `text_answer = "submit_answer"`."""
    files = read_folder(DEMO_DIR / "inventory_tools")
    files["environment.toml"] = files["environment.toml"].replace(
        'max_steps = 30\n', 'max_steps = 30\ntext_answer = "submit_answer"\n')
    env = env_services.environment_create(team=team, actor=owner, name="inventory answers", slug="inventory-answers",
                                          files=files)
    return env_services.version_commit(environment=env, actor=owner, message="text answers", files=files)


@pytest.fixture(autouse=True)
def offline_hub(tmp_path, monkeypatch):
    """`datasets` and `transformers` never reach a hub here and cache under the test's own folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
