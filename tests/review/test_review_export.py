"""Export: every line parses, counts match the decision filter, chat format, the command, flat memory."""
import io
import json
import tracemalloc

from django.core.management import call_command

from runs.models import Rollout
from runs.review import services
from runs.review.export import export_lines


def lines_of(rollouts, **kw):
    return [json.loads(line) for line in export_lines(rollouts, **kw)]


def test_round_trip_every_line_parses_and_counts_follow_the_decision(make_run, reviewer, owner):
    run = make_run([1.0, 0.0, 1.0, 0.5], steps=4)
    a, b, c, d = run.rollouts.order_by("id")
    services.label_decide(rollout=a, actor=reviewer, decision="approved")
    services.label_decide(rollout=b, actor=reviewer, decision="overridden", value=1.0, rationale="verifier missed it")
    services.label_decide(rollout=c, actor=reviewer, decision="rejected")
    services.annotation_add(rollout=b, actor=owner, text="hack?", tags=["reward-hack"], step=b.steps.get(index=2))

    everything = lines_of(run.rollouts.all(), decision="all")
    assert [line["rollout_id"] for line in everything] == [a.pk, b.pk, c.pk, d.pk]
    assert [line["rollout_id"] for line in lines_of(run.rollouts.all())] == [a.pk, b.pk]  # approved or overridden
    assert [line["rollout_id"] for line in lines_of(run.rollouts.all(), decision="overridden")] == [b.pk]

    line_b = everything[1]
    assert line_b["environment"] == "counter-review" and line_b["version"] == "counter-review@1"
    assert line_b["content_hash"] == run.environment_version.content_hash
    assert (line_b["task_id"], line_b["seed"], line_b["agent"]["name"]) == ("t1", 1, "random")
    assert (line_b["verifier_reward"], line_b["verifier_reason"]) == (0.0, "reward 0.0")
    assert line_b["label"] == {"value": 1.0, "decision": "overridden", "source": "human"}
    assert line_b["label_by"]["reviewer"] == "rita" and line_b["label_by"]["rationale"] == "verifier missed it"
    assert [(n["step"], n["tags"]) for n in line_b["annotations"]] == [(2, ["reward-hack"])]
    assert [s["index"] for s in line_b["steps"]] == [0, 1, 2, 3]
    assert line_b["steps"][3] == {"index": 3, "action": 3, "observation": {"n": 3, "text": "é ✓"}, "reward": 0.5,
                                  "terminated": True, "truncated": False, "info": {"i": 3}}
    assert everything[3]["label"] == {"value": 0.5, "decision": "proposed", "source": "verifier"}


def test_rollouts_with_no_steps_or_many_steps_across_chunks(make_run, monkeypatch):
    from runs.review import export

    monkeypatch.setattr(export, "CHUNK_ROLLOUTS", 3)
    monkeypatch.setattr(export, "CHUNK_STEPS", 5)
    run = make_run([1.0] * 7, steps=4)
    empty = make_run([1.0], steps=0).rollouts.get()
    lines = lines_of(Rollout.objects.filter(run__in=[run, empty.run]), decision="all")
    assert len(lines) == 8 and [len(line["steps"]) for line in lines] == [4] * 7 + [0]
    assert all([s["index"] for s in line["steps"]] == list(range(4)) for line in lines[:7])


def test_chat_format_turns_tool_calls_into_assistant_tool_calls(make_run):
    run = make_run([1.0], steps=2, tool_calls=True)
    (line,) = lines_of(run.rollouts.all(), decision="all", fmt="chat")
    roles = [m["role"] for m in line["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    call = line["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "lookup_item", "arguments": {"name": "item 0"}}
    assert line["messages"][3]["tool_call_id"] == call["id"]
    assert json.loads(line["messages"][3]["content"]) == {"n": 0, "text": "é ✓"}
    assert line["reward"] == 1.0 and line["metadata"]["label"] == {"value": 1.0, "decision": "proposed"}


def test_chat_format_without_tools_uses_plain_turns(make_run):
    (line,) = lines_of(make_run([0.0], steps=1).rollouts.all(), decision="all", fmt="chat")
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "user"]
    assert line["messages"][2]["content"] == "0"


def test_command_exports_with_decision_and_chat_format(make_run, reviewer):
    run = make_run([1.0, 0.0])
    services.label_decide(rollout=run.rollouts.order_by("id").first(), actor=reviewer, decision="approved")

    def command(*args):
        out = io.StringIO()
        call_command("export_trajectories", "--run", str(run.pk), *args, stdout=out)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    assert len(command()) == 2
    assert len(command("--approved-only")) == 1
    assert command("--decision", "overridden") == []
    assert "messages" in command("--format", "chat", "--decision", "all")[0]


def test_streamed_export_of_2000_rollouts_keeps_memory_flat(make_run):
    # 2,000 rollouts of 8 steps: as many bytes as 5,000 of 3, at two fifths of the labels to insert
    # (each label's review and agreement tallies are kept by a trigger, row by row).
    run = make_run([1.0] * 2_000, steps=8)
    tracemalloc.start()
    try:
        count = written = 0
        for line in export_lines(run.rollouts.all(), decision="all"):
            count += 1
            written += len(line)
            if count == 200:
                _, peak_early = tracemalloc.get_traced_memory()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2_000
    # The whole export is MBs; memory held is one chunk's worth, the same at 200 lines as at 2,000.
    assert written > 2 * 1024 * 1024
    assert peak < written / 2, (peak, written)
    assert peak < peak_early * 1.5 + 512 * 1024, (peak_early, peak)
