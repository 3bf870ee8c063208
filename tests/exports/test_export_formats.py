"""Every export format loads with the real `datasets` library, mixed rollouts and all, and chat
exports render through TRL's shipped chat templates with tool-call arguments encoded once."""
import io
import json

import datasets
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from transformers.utils.chat_template_utils import render_jinja_template
from trl import chat_template_utils as trl_templates
from trl.trainer.utils import remove_none_values

from runs import services
from runs.models import Step
from runs.review import services as review_services
from tests.agents.conftest import reply, tool_call
from tests.conftest import login
from tests.runs.rollout_factories import play_run

pytestmark = pytest.mark.django_db(transaction=True)

FILES = ("jsonl", "parquet")
# Chat templates TRL ships, and how each writes the call lookup_item(name="blue widget"): qwen2.5 always
# `tojson`s the arguments, qwen3 (training) takes text as is, qwen3.5 walks the object's items.
TEMPLATES = {
    "qwen2_5_chat_template": '{"name": "lookup_item", "arguments": {"name": "blue widget"}}',
    "qwen3_training_chat_template": '{"name": "lookup_item", "arguments": {"name": "blue widget"}}',
    "qwen3_5_nothink_training_chat_template": "<function=lookup_item>\n<parameter=name>\nblue widget\n</parameter>",
}


def page_url(run) -> str:
    return reverse("review:export_run", kwargs={"team": run.team.slug, "run_id": run.pk})


def download(api, path, **params) -> tuple[bytes, int]:
    response = api.get(path, params)
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content), int(response["X-Export-Count"])


def load(body: bytes, file: str, tmp_path) -> datasets.Dataset:
    path = tmp_path / f"export-{len(list(tmp_path.iterdir()))}.{file}"
    path.write_bytes(body)
    return datasets.load_dataset("json" if file == "jsonl" else "parquet", data_files=str(path), split="train",
                                 cache_dir=str(tmp_path / "cache"))


@pytest.fixture
def mixed(team, owner, inventory, model_agent, model_server, make_run):
    """One team, three kinds of rollout: a model agent's tool calls, integer actions, random tool calls."""
    model_server.add(
        reply(tool_call("lookup_item", {"name": "blue widget"}, "a"), tool_call("list_items", {"category": "tools"}, "b")),
        reply(tool_call("submit_answer", {"answer": "42"}, "c")),
    )
    run = services.run_create(team=team, actor=owner, version=inventory, agent=model_agent(), task_ids=["q1"], seeds=[0])
    (model_rollout,) = play_run(run)
    ints = make_run([1.0, 0.0], steps=2)
    calls = make_run([0.5], steps=2, tool_calls=True, agent_name="caller")
    return {"model": model_rollout, "ints": ints, "calls": calls}


@pytest.mark.parametrize("file", FILES)
@pytest.mark.parametrize("fmt", ["trajectory", "chat"])
def test_a_mixed_export_loads_in_datasets_with_one_schema(owner_api, mixed, tmp_path, fmt, file):
    body, count = download(owner_api, "/review/export", decision="all", format=fmt, file=file)
    dataset = load(body, file, tmp_path)
    assert count == 4 and dataset.num_rows == 4
    rows = list(dataset)
    assert len({tuple(sorted(row)) for row in rows}) == 1  # the same keys on every row
    if fmt == "trajectory":
        actions = [step["action"] for row in rows for step in row["steps"]]
        assert {"tool": "lookup_item", "arguments": {"name": "blue widget"}} in actions and 0 in actions
    else:
        calls = [call for row in rows for m in row["messages"] for call in (m["tool_calls"] or [])]
        assert calls and all(isinstance(call["function"]["arguments"], dict) for call in calls)
        assert {"name": "blue widget"} in [call["function"]["arguments"] for call in calls]
        assert all(tool["type"] == "function" for row in rows for tool in row["tools"])


@pytest.mark.parametrize("file", FILES)
@pytest.mark.parametrize("template", TEMPLATES)
def test_chat_exports_render_through_trl_templates_without_double_encoding(owner_api, mixed, tmp_path, file, template):
    body, _ = download(owner_api, f"/runs/{mixed['model'].run_id}/export", decision="all", format="chat", file=file)
    (row,) = load(body, file, tmp_path)
    (text,), _ = render_jinja_template(conversations=[row["messages"]], tools=row["tools"],
                                      chat_template=getattr(trl_templates, template))
    assert TEMPLATES[template] in text
    assert '\\"' not in text  # no argument went through JSON twice
    assert "submit_answer" in text and "blue widget" in text


def test_string_arguments_keep_the_models_text_and_would_double_encode_in_a_tojson_template(owner_api, mixed, tmp_path):
    body, _ = download(owner_api, f"/runs/{mixed['model'].run_id}/export", decision="all", format="chat", arguments="string")
    (row,) = load(body, "jsonl", tmp_path)
    (text,), _ = render_jinja_template(conversations=[row["messages"]], tools=row["tools"],
                                      chat_template=trl_templates.qwen3_training_chat_template)
    assert '"arguments": {"name": "blue widget"}' in text  # qwen3 takes text arguments as they are
    (text,), _ = render_jinja_template(conversations=[row["messages"]], tools=row["tools"],
                                      chat_template=trl_templates.qwen2_5_chat_template)
    assert '\\"name\\"' in text  # why objects are the default: this template encodes the text again


def test_filters_by_label_and_reward(owner_api, reviewer, make_run):
    run = make_run([1.0, 0.0, 0.5, 0.8], steps=1)
    a, b, c, d = run.rollouts.order_by("id")
    review_services.label_decide(rollout=a, actor=reviewer, decision="approved")
    review_services.label_decide(rollout=b, actor=reviewer, decision="overridden", value=0.9, rationale="fine")
    review_services.label_decide(rollout=c, actor=reviewer, decision="rejected")

    def ids(**params):
        body, count = download(owner_api, f"/runs/{run.pk}/export", **params)
        found = [json.loads(line)["rollout_id"] for line in body.decode().splitlines()]
        assert count == len(found)
        return found

    assert ids() == [a.pk, b.pk]
    assert ids(decision="rejected") == [c.pk]
    assert ids(decision="proposed") == [d.pk]
    assert ids(decision="all", min_reward=0.8) == [a.pk, b.pk, d.pk]  # b counts at its override, 0.9
    assert ids(decision="all", min_reward=0.6, max_reward=0.85) == [d.pk]
    assert ids(decision="approved", max_reward=0.95) == [b.pk]


def test_an_export_matching_nothing_is_an_empty_file_via_the_api_and_a_message_on_the_page(owner, owner_api, make_run, tmp_path):
    run = make_run([0.0], steps=1)
    body, count = download(owner_api, f"/runs/{run.pk}/export", decision="approved")
    assert (body, count) == (b"", 0)
    body, count = download(owner_api, f"/runs/{run.pk}/export", decision="approved", format="chat", file="parquet")
    table = pq.read_table(io.BytesIO(body))
    assert count == 0 and table.num_rows == 0 and "messages" in table.column_names

    page = login(owner).get(page_url(run), {"decision": "approved", "min_reward": "0.5"})
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    assert "0 rollouts match" in page.content.decode() and "approved or overridden, reward at least 0.5" in page.content.decode()


def test_bad_export_parameters_are_a_400_naming_the_parameter(owner, owner_api, make_run):
    run = make_run([1.0], steps=1)
    response = owner_api.get(f"/runs/{run.pk}/export", {"min_reward": 1, "max_reward": 0})
    assert response.status_code == 400 and response.json()["field"] == "min_reward"
    response = owner_api.get(f"/runs/{run.pk}/export", {"file": "csv"})
    assert response.status_code in (400, 422) and "file" in json.dumps(response.json())
    page = login(owner).get(page_url(run), {"min_reward": "lots"})
    assert page.status_code == 400 and "min_reward must be a number" in page.content.decode()


def test_the_page_downloads_parquet(owner, mixed, tmp_path):
    run = mixed["ints"]
    response = login(owner).get(page_url(run), {"decision": "all", "file": "parquet"})
    assert response.status_code == 200 and response["X-Export-Count"] == "2"
    assert response["Content-Disposition"].endswith('-all.parquet"')
    assert load(b"".join(response.streaming_content), "parquet", tmp_path).num_rows == 2


def test_the_command_writes_parquet_and_says_when_nothing_matches(mixed, tmp_path):
    run = mixed["model"].run
    path = tmp_path / "chat.parquet"
    err = io.StringIO()
    call_command("export_trajectories", "--run", str(run.pk), "--format", "chat", "--output", str(path), stderr=err)
    assert "Wrote 1 rollout" in err.getvalue()
    (row,) = load(path.read_bytes(), "parquet", tmp_path)
    assert row["metadata"]["transcript"] == "recorded"
    out, err = io.StringIO(), io.StringIO()
    call_command("export_trajectories", "--run", str(run.pk), "--decision", "rejected", stdout=out, stderr=err)
    assert out.getvalue() == "" and "0 rollouts of run" in err.getvalue()


def test_the_inspect_log_export_reads_back_with_inspect(owner_api, mixed, tmp_path):
    from inspect_ai.log import read_eval_log

    body, count = download(owner_api, "/review/export", decision="all", format="inspect")
    path = tmp_path / "studio.json"
    path.write_bytes(body)
    log = read_eval_log(str(path))
    assert count == 4 and len(log.samples) == 4 and log.status == "success"
    model_sample = next(s for s in log.samples if s.id == mixed["model"].pk)
    assert [m.role for m in model_sample.messages][:3] == ["system", "user", "assistant"]
    calls = model_sample.messages[2].tool_calls
    assert [(c.function, c.arguments) for c in calls] == [("lookup_item", {"name": "blue widget"}), ("list_items", {"category": "tools"})]
    assert model_sample.scores["studio_verifier"].value == 1.0
    assert log.results.scores[0].metrics["mean"].value == pytest.approx((1.0 + 1.0 + 0.0 + 0.5) / 4)
    response = owner_api.get("/review/export", {"format": "inspect", "file": "parquet"})
    assert response.status_code == 400 and response.json()["field"] == "file"


def test_every_export_keeps_the_environments_key_order(owner_api, make_run):
    """An environment that puts `zeta` before `alpha` finds it so in trajectory and chat exports alike."""
    run = make_run([1.0], steps=2)
    observation = {"zeta": 1, "alpha": {"y": 2, "b": 3}}
    for step in Step.objects.filter(rollout__run=run):
        step.observation = observation
        step.save(update_fields=["observation"])
    in_order = json.dumps(observation, ensure_ascii=False)

    body, _ = download(owner_api, f"/runs/{run.pk}/export", format="trajectory", decision="all")
    (row,) = [json.loads(line) for line in body.decode().splitlines()]
    assert [list(step["observation"]) for step in row["steps"]] == [["zeta", "alpha"]] * 2
    assert list(row["steps"][0]["observation"]["alpha"]) == ["y", "b"]

    body, _ = download(owner_api, f"/runs/{run.pk}/export", format="chat", decision="all")
    (row,) = [json.loads(line) for line in body.decode().splitlines()]
    shown = [m["content"] for m in row["messages"] if isinstance(m.get("content"), str) and "zeta" in m["content"]]
    assert shown and all(in_order in content for content in shown), row["messages"]


# Templates that test a key's presence (deepseek), want one call a message (llama 3.1), or write their own
# channels (gpt-oss): how each writes the call submit_answer(answer="42"), and the arguments form it takes
# (deepseek concatenates them as text).
TEMPLATES_BY_KEY = {
    "llama3_1_chat_template": ('"name": "submit_answer", "parameters": {"answer": "42"}', "object"),
    "gptoss_chat_template": ('to=functions.submit_answer<|channel|>commentary json<|message|>{"answer": "42"}', "object"),
    "deepseekv3_chat_template": ('submit_answer\n```json\n{"answer": "42"}\n```', "string"),
    "qwen2_5_chat_template": ('{"name": "submit_answer", "arguments": {"answer": "42"}}', "object"),
}


@pytest.mark.parametrize("file", FILES)
def test_chat_exports_render_through_llama3_gpt_oss_and_deepseek_as_trl_loads_them(
        owner_api, team, owner, inventory, model_agent, model_server, tmp_path, file):
    model_server.add(
        reply(tool_call("lookup_item", {"name": "blue widget"}, "a")),
        reply(tool_call("submit_answer", {"answer": "42"}, "c")),
    )
    run = services.run_create(team=team, actor=owner, version=inventory, agent=model_agent(), task_ids=["q1"], seeds=[0])
    play_run(run)
    for template, (expected, arguments) in TEMPLATES_BY_KEY.items():
        body, _ = download(owner_api, f"/runs/{run.pk}/export", decision="all", format="chat", file=file, arguments=arguments)
        # datasets gives every message every key (None where absent); TRL's trainers take those out again.
        row = load(body, file, tmp_path).with_transform(remove_none_values)[0]
        (text,), _ = render_jinja_template(conversations=[row["messages"]], tools=row["tools"], bos_token="<s>",
                                          chat_template=getattr(trl_templates, template))
        assert expected in text, (template, text[-600:])
        assert "lookup_item" in text and "blue widget" in text, template


def test_without_inspect_ai_installed_the_inspect_export_says_which_extra_it_needs(owner_api, make_run, monkeypatch):
    """The runtime install leaves inspect-ai out (the interop extra): asking for an Inspect log is a 400
    naming the format and the extra, never a 500; the other formats still download."""
    import sys

    run = make_run([1.0], steps=1)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # as if not installed: nothing can import it
    response = owner_api.get(f"/runs/{run.pk}/export", {"format": "inspect", "decision": "all"})
    assert response.status_code == 400 and response.json()["field"] == "format"
    assert "environment-studio[interop]" in response.json()["detail"]
    assert owner_api.get(f"/runs/{run.pk}/export", {"format": "trajectory", "decision": "all"}).status_code == 200
    with pytest.raises(CommandError, match=r"installed without"):
        call_command("export_trajectories", "--run", str(run.pk), "--format", "inspect", "--output", "/tmp/never.json")
