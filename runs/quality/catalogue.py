"""The audit's checks by stable id: what each catches, its colour rule, and the property of a good
environment it serves (the six of OpenEnv's RFC 008, with the RFC's own check id). Every card line
names its check by one of these ids (`line["id"]`); docs/quality.md lists the same catalogue."""

GREEN, AMBER, RED = "green", "amber", "red"

# RFC 008's six properties of an environment a lab would train on.
SCALES, LEARNABLE, SECURE, UNHACKABLE, OBSERVABLE, REPRODUCIBLE = (
    "scales on infra", "learnable", "secure", "not prone to reward hacking", "observable & self-describing", "reproducible",
)

CHECKS = {
    "probe.reward": {
        "catches": "a hack probe (noop, random, claim, peek, tamper, the package's own) that the verifier rewards;"
                   " tamper: a verdict the agent forges by writing a report file the verifier reads",
        "colours": "red: the probe's mean reward is above its threshold; green otherwise",
        "property": UNHACKABLE, "rfc": "semantic.floor_gap",
    },
    "probe.return": {
        "catches": "step rewards a probe can farm without the outcome",
        "colours": "red: the probe's mean return reaches the oracle's while its verifier reward stays below the oracle's,"
                   " or its return is above 0 where the verifier says 0 on most of its episodes; green otherwise",
        "property": UNHACKABLE, "rfc": "runtime.reward_attribution",
    },
    "probe.answer": {
        "catches": "a lenient verifier, even in one-shot episodes: it accepts one answer holding many candidates (shotgun),"
                   " the oracle's answer with junk appended (perturb), another task's answer (cross) or schema-valid junk (junk)",
        "colours": "red: an answer probe's mean reward is above its threshold; amber: the sandbox failed some of its"
                   " replays; green otherwise (also when the version's actions answer nothing)",
        "property": UNHACKABLE, "rfc": "semantic.floor_gap",
    },
    "probe.crash": {
        "catches": "an environment that fails (errors, times out) under a probe's actions",
        "colours": "amber: some probe rollout errored or timed out because of the environment",
        "property": SECURE, "rfc": "runtime.resource_bounds",
    },
    "leak": {
        "catches": "hidden task fields or the oracle's answers in what the agent is shown",
        "colours": "red: a value found in a reset observation or info, a step the agent still acts on, a tool spec"
                   " or a file the agent can read; green otherwise",
        "property": OBSERVABLE, "rfc": "semantic.no_solution_leakage",
    },
    "oracle": {
        "catches": "instances (task, seed) nobody can solve, and a too strict verifier",
        "colours": "red: the oracle fails an instance of a task not declared stochastic, or raises; amber: no oracle,"
                   " or a stochastic task's pass rate below its declared floor; green: every instance passes",
        "property": UNHACKABLE, "rfc": "semantic.oracle_max",
    },
    "determinism": {
        "catches": "episodes that do not repeat for the same version, task, seed and actions",
        "colours": "red: a pair diverges; amber: no pair finished; green: all pairs identical",
        "property": REPRODUCIBLE, "rfc": "runtime.episode_determinism",
    },
    "difficulty": {
        "catches": "difficulty levels that do not rank the tasks, or run backwards",
        "colours": "judged on an agent that is not the oracle (the evaluation agent with most rollouts whose outcome varies,"
                   " else the audit's random probe): red when the rank agreement of level and failing is -0.5 or below with"
                   " p <= 0.05 for running backwards, amber when below -0.2 with p <= 0.1, both with suggested levels;"
                   " without such an agent, amber when a harder level passes more often than an easier one; green otherwise",
        "property": LEARNABLE, "rfc": "statistical.difficulty_separation",
    },
    "regression": {
        "catches": "a new verifier that disagrees with human labels of earlier versions",
        "colours": "red: any flipped case; green: agreement on every case (no line without human labels)",
        "property": UNHACKABLE, "rfc": "semantic.verifier_portability",
    },
    "verifier.consistency": {
        "catches": "a verifier that disagrees with itself: the same final state (a replay of a stored episode) judged"
                   " several times gets different rewards (it decides by chance or by the clock)",
        "colours": "red: an instance's verdicts differ across the verify() calls (re-verification by the version is then"
                   " refused); amber: the sandbox failed some replays; green otherwise (also for browser versions, not replayed)",
        "property": REPRODUCIBLE, "rfc": "semantic.verifier_determinism",
    },
    "portability": {
        "catches": "episodes that repeat in the studio but change outside it: replayed under another hash seed"
                   " (str hashes, so set iteration order) or another time zone, they diverge",
        "colours": "amber: a replay under another hash seed or time zone diverges from the stored episode (or fails);"
                   " green otherwise",
        "property": REPRODUCIBLE, "rfc": "hub.cross_host_determinism",
    },
}
