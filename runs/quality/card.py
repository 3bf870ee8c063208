"""The audit's card: one line per finding, each naming its check by its catalogue id, and the
report's one word (passed, warnings, flagged). From the figures report.py computes."""
from .catalogue import AMBER, CHECKS, GREEN, RED


def report_status(lines: list[dict]) -> str:
    """The audit in one word: passed (all green), warnings (some amber, none red), flagged (any red)."""
    levels = {line["level"] for line in lines}
    return "flagged" if RED in levels else "warnings" if AMBER in levels else "passed"


def check_summary(lines: list[dict]) -> list[dict]:
    """Each check of the catalogue that has a line, with its worst level and how many lines it has."""
    rank = {GREEN: 0, AMBER: 1, RED: 2}
    worst: dict = {}
    for line in lines:
        level, count = worst.get(line["id"], (GREEN, 0))
        worst[line["id"]] = (max(level, line["level"], key=rank.get), count + 1)
    return [{"id": check_id, "level": level, "lines": count, "property": CHECKS[check_id]["property"]}
            for check_id, (level, count) in worst.items()]


def card_lines(report: dict) -> list[dict]:
    """One line per finding: its check's stable id (catalogue.py), level (green, amber, red), a
    readable sentence, and the rollout behind it."""
    lines = []

    def add(check_id, key, level, text, rollout=None):
        lines.append({"id": check_id, "check": key, "level": level, "text": text, "rollout": rollout})

    returns = report.get("returns") or {}
    farmed = {entry["name"]: entry for entry in returns.get("farmed", [])}
    for probe in report["probes"]:
        if probe["rollouts"] == 0:
            add("probe.reward", f"probe:{probe['name']}", AMBER, f"Probe `{probe['name']}` finished no rollout.")
            continue
        level = RED if probe["flagged"] else GREEN
        text = (f"Probe `{probe['name']}` scores {probe['mean_reward']:.2f} on average (max {probe['max_reward']:.2f},"
                f" threshold {probe['threshold']:.2f}; return {probe.get('mean_return') or 0.0:.2f})")
        text += ": the verifier rewards it, see its best rollout." if probe["flagged"] else "."
        add("probe.reward", f"probe:{probe['name']}", level, text, probe["best_rollout"] if probe["flagged"] else None)
        if probe["name"] in farmed:
            entry = farmed[probe["name"]]
            add("probe.return", f"probe:{probe['name']}:return", RED,
                f"Probe `{probe['name']}` farms the step reward: {'; '.join(entry['reasons'])}.", entry["rollout"])
        if probe["crashes"]:
            crash = probe["crashes"][0]
            add("probe.crash", f"probe:{probe['name']}:crash", AMBER,
                f"The environment failed under probe `{probe['name']}` in {len(probe['crashes'])}"
                f" rollout(s), e.g. task {crash['task_id']} seed {crash['seed']}: {crash['error']}", crash["rollout"])
    if returns and not farmed and report["probes"]:
        correlation = returns.get("correlation")
        said = f"; return and verifier reward correlate at {correlation:.2f} over the audit" if correlation is not None else ""
        add("probe.return", "returns", GREEN, f"No probe farms the step reward{said}.")
    elif returns.get("correlation") is not None:
        add("probe.return", "returns:correlation", GREEN,
            f"Return and verifier reward correlate at {returns['correlation']:.2f} over the audit's {returns['rollouts']} episodes.")
    answer_lines(report.get("answers"), add)
    leaks = report.get("leaks")
    if leaks is not None:
        if leaks["hits"]:
            hit = leaks["hits"][0]
            more = f", and {leaks['count'] - 1} more" if leaks["count"] > 1 else ""
            seed = f" seed {hit['seed']}" if hit["seed"] is not None else ""
            add("leak", "leak", RED,
                f"A hidden answer reaches the agent: {hit['secret']} of task {hit['task_id']}{seed} is in the {hit['where']}"
                f" at `{hit['path']}`{more}.", hit["rollout"])
        elif leaks["scanned"]:
            add("leak", "leak", GREEN, f"No hidden field or oracle answer is in what the agent is shown ({leaks['scanned']} items searched).")
        else:
            add("leak", "leak", GREEN, "Nothing hidden to search for: no hidden task field and no oracle answer of 2 characters or more.")
    oracle = report["oracle"]
    if oracle is None:
        add("oracle", "oracle", AMBER, "No oracle: the package has no oracle.py (or [quality] oracle), so solvability is unchecked.")
    elif oracle["errors"]:
        error = oracle["errors"][0]
        add("oracle", "oracle", RED, f"The oracle failed in {len(oracle['errors'])} rollout(s), e.g. task {error['task_id']}: {error['error']}",
            error["rollout"])
    else:
        failures = [failure for failure in oracle.get("failures", []) if not failure["stochastic"]]
        if failures:
            listed = ", ".join(f"{failure['task_id']} seed {failure['seed']}" for failure in failures)
            add("oracle", "oracle", RED, f"The oracle fails {len(failures)} of {oracle['instances']} instances ({listed}):"
                f" unsolvable, or the verifier is too strict.", failures[0]["rollout"])
        elif oracle["unsolved"]:
            first = oracle["unsolved"][0]
            add("oracle", "oracle", RED, f"The oracle cannot solve {', '.join(oracle['unsolved'])}: unsolvable, or the verifier is too strict.",
                oracle["unsolved_rollouts"].get(first))
        else:
            stochastic = len(oracle.get("stochastic", []))
            add("oracle", "oracle", GREEN, f"The oracle solves every instance of {'all ' if oracle['tasks'] > 1 else ''}{oracle['tasks']} task{'s' if oracle['tasks'] != 1 else ''}"
                f" ({oracle.get('instances', oracle['tasks'])} task-seed pairs)." if not stochastic else
                f"The oracle solves every instance of the {oracle['tasks'] - stochastic} task(s) not declared stochastic.")
        for rate in oracle.get("stochastic", []):
            floor = f", floor {rate['floor']:.0%}" if rate["floor"] is not None else ""
            level = AMBER if rate["below_floor"] else GREEN
            failed = [f"seed {failure['seed']}" for failure in oracle.get("failures", []) if failure["task_id"] == rate["task_id"]]
            add("oracle", f"oracle:{rate['task_id']}", level,
                f"Task {rate['task_id']} is declared stochastic: the oracle passes {rate['pass_rate']:.0%} of its tries{floor}"
                + (f" (fails {', '.join(failed)})." if failed else "."),
                next((failure["rollout"] for failure in oracle.get("failures", []) if failure["task_id"] == rate["task_id"]), None)
                if rate["below_floor"] else None)
    det = report["determinism"]
    if det["divergent"]:
        first = det["divergent"][0]
        add("determinism", "determinism", RED,
            f"{len(det['divergent'])} of {det['pairs']} repeated episodes diverge, e.g. task {first['task_id']}"
            f" seed {first['seed']} at step {first['first_divergent_step']} ({first['reason']})", first["rollouts"][1])
    elif det["pairs"]:
        add("determinism", "determinism", GREEN, f"All {det['pairs']} repeated episodes are identical.")
    else:
        add("determinism", "determinism", AMBER, "No determinism pair finished.")
    consistency_lines(report.get("consistency"), add)
    portability_lines(report.get("portability"), add)
    transfer = report["transfer"]
    by = f" (agent {transfer['agent']})" if transfer.get("agent") else ""
    order = report.get("order") or {}
    if order.get("agent"):
        order_line(order, add)
    elif transfer["non_monotone"]:
        bad = transfer["non_monotone"][0]
        add("difficulty", "difficulty", AMBER,
            f"Difficulty {bad['harder']} passes more often ({bad['harder_pass_rate']:.0%}) than"
            f" difficulty {bad['easier']} ({bad['easier_pass_rate']:.0%}){by}.")
    elif report["difficulty"]:
        add("difficulty", "difficulty", GREEN, f"Harder levels pass no more often than easier ones{by}.")
    regression = report.get("regression")
    if regression and regression.get("cases"):
        if regression["flipped"]:
            case = regression["flipped"][0]
            add("regression", "regression", RED,
                f"The verifier disagrees with {len(regression['flipped'])} of {regression['cases']} human"
                f" labels of earlier versions (agreement {regression['agreement']:.0%}).", case["rollout"])
        else:
            add("regression", "regression", GREEN, f"The verifier agrees with all {regression['cases']} human labels of earlier versions.")
    return lines


# What each answer probe submits, as a card line says it.
ANSWER_PROBE_SAYS = {
    "shotgun": "one answer holding many candidates",
    "perturb": "the oracle's answer with junk appended",
    "cross": "another task's oracle answer",
    "junk": "schema-valid junk",
}


def answer_lines(answers: dict | None, add) -> None:
    """The answer probes' lines (check `probe.answer`): one red line per probe the verifier accepts, with
    an example answer; amber for replays the sandbox failed; else one green line with the counts."""
    if answers is None:
        return
    if not answers.get("applies"):
        add("probe.answer", "answers", GREEN, f"Answer probes not played: {answers.get('why_not') or 'not applicable'}.")
        return
    quiet = []
    for probe in answers["probes"]:
        name = probe["name"]
        if probe["flagged"]:
            example = probe["example"] or {}
            add("probe.answer", f"answer:{name}", RED,
                f"Answer probe `{name}` passes where it must fail: the verifier accepts {ANSWER_PROBE_SAYS.get(name, 'an answer that must fail')}"
                f" in {probe['passed']} of {probe['instances']} instances (mean {probe['mean_reward']:.2f}, threshold {probe['threshold']:.2f}),"
                f" e.g. task {example.get('task_id')} seed {example.get('seed')}: `{example.get('said', '')}`.")
        elif probe["errors"]:
            error = probe["errors"][0]
            add("probe.answer", f"answer:{name}:error", AMBER,
                f"The sandbox failed {len(probe['errors'])} replay(s) of answer probe `{name}`, e.g. task {error['task_id']}"
                f" seed {error['seed']}: {error['error']}")
        else:
            quiet.append(f"`{name}` {probe['passed']} of {probe['instances']}" if probe["instances"]
                         else f"`{name}` not played ({probe['skipped'] or 'no instance'})")
    if quiet:
        others = " other" if len(quiet) < len(answers["probes"]) else ""
        add("probe.answer", "answers", GREEN, f"The verifier refuses the{others} answer probes (instances passed: {', '.join(quiet)}).")


def order_line(order: dict, add) -> None:
    """The difficulty check's line from a non-oracle agent's rank agreement (report.difficulty_order):
    red when the levels run backwards, amber when they lean backwards, each with the suggested levels."""
    levels = ", ".join(f"{entry['difficulty']}: {entry['pass_rate']:.0%}" for entry in order["levels"] if entry["pass_rate"] is not None)
    said = (f"agent {order['agent']} over {order['rollouts']} rollouts, rank agreement {order['agreement']:+.2f}"
            f" (p {order['p_backwards']:.3f} for backwards; pass rate by level {levels})")
    relevel = ", ".join(f"{entry['task_id']} {entry['difficulty']}→{entry['suggested']}" for entry in order["relevel"])
    suggest = f" Suggested levels: {relevel}." if relevel else ""
    if order["verdict"] == "backwards":
        add("difficulty", "difficulty", RED, f"The difficulty levels run backwards: harder levels pass more often ({said}).{suggest}")
    elif order["verdict"] == "weak":
        add("difficulty", "difficulty", AMBER, f"The difficulty levels lean backwards ({said}).{suggest}")
    else:
        verdict = "Harder levels fail more often" if order["agreement"] > 0 else "The levels do not clearly run backwards"
        add("difficulty", "difficulty", GREEN, f"{verdict} ({said}).")


def said_verdicts(verdicts: list) -> str:
    return ", ".join("none" if verdict is None else f"{verdict:g}" for verdict in verdicts)


def consistency_lines(consistency: dict | None, add) -> None:
    """Check `verifier.consistency`: red when a final state got different verdicts, listing the instances;
    amber for replays the sandbox failed; else green with the counts."""
    if consistency is None:
        return
    if not consistency.get("applies"):
        add("verifier.consistency", "consistency", GREEN, f"Verifier consistency not checked: {consistency.get('why_not')}.")
        return
    inconsistent = consistency["inconsistent"]
    if inconsistent:
        count = consistency.get("count") or len(inconsistent)
        listed = "; ".join(f"task {entry['task_id']} seed {entry['seed']} ({entry['source']}): {said_verdicts(entry['verdicts'])}"
                           for entry in inconsistent[:5])
        more = f"; and {count - 5} more" if count > 5 else ""
        add("verifier.consistency", "consistency", RED,
            f"The verifier disagrees with itself on {count} of {consistency['instances']} replayed instances (the same final"
            f" state verified {consistency['calls']} times): {listed}{more}. Re-verification by this version is refused.",
            inconsistent[0]["rollout"])
    elif consistency["instances"]:
        add("verifier.consistency", "consistency", GREEN,
            f"The verifier gives one verdict per final state ({consistency['instances']} replayed instances, each verified"
            f" {consistency['calls']} times).")
    if consistency["errors"]:
        error = consistency["errors"][0]
        add("verifier.consistency", "consistency:error", AMBER,
            f"The sandbox failed {len(consistency['errors'])} replay(s) of the verifier consistency check, e.g. task"
            f" {error['task_id']} seed {error['seed']}: {error['error']}", error["rollout"])
    elif not consistency["instances"]:
        add("verifier.consistency", "consistency", GREEN, "Verifier consistency not checked: no episode of the oracle or the"
            " `random` probe ran to its end.")


def portability_lines(portability: dict | None, add) -> None:
    """Check `portability`: amber per convention (hash order, time zone) whose replays diverge or fail; else
    one green line."""
    if portability is None:
        return
    if not portability.get("applies"):
        add("portability", "portability", GREEN, f"Portability not checked: {portability.get('why_not')}.")
        return
    quiet = []
    for convention in portability["conventions"]:
        divergent, errors = convention["divergent"], convention["errors"]
        if divergent:
            first = divergent[0]
            add("portability", f"portability:{convention['name']}", AMBER,
                f"Not portable: depends on {convention['name']}. Replayed with {convention['says']}, {len(divergent)} of"
                f" {convention['replayed']} episodes diverge, e.g. task {first['task_id']} seed {first['seed']} at step"
                f" {first['first_divergent_step']} ({first['reason']}).", first["rollout"])
        elif errors:
            error = errors[0]
            add("portability", f"portability:{convention['name']}", AMBER,
                f"Not portable: depends on {convention['name']}. Replayed with {convention['says']}, {len(errors)} of"
                f" {convention['replayed']} episodes fail, e.g. task {error['task_id']} seed {error['seed']}: {error['error']}",
                error["rollout"])
        else:
            quiet.append(convention["says"])
    if quiet and portability["instances"]:
        add("portability", "portability", GREEN,
            f"Episodes repeat outside the studio's conventions: {portability['instances']} replayed with {' and, apart, '.join(quiet)}.")
    elif not portability["instances"]:
        why = (f"none of the `random` probe's {portability['unrepeatable']} episodes repeats even in the studio (see determinism)"
               if portability.get("unrepeatable") else "no episode of the `random` probe ran to its end")
        add("portability", "portability", GREEN, f"Portability not checked: {why}.")
