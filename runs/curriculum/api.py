"""REST endpoints of the curriculum: task statistics per agent and the samplers (docs/curriculum.md)."""
from ninja import Router, Schema
from pydantic import Field

from environments.selectors import environment_get, version_get
from studio.auth import require

from . import services
from .sampler import MAX_K

router = Router(tags=["curriculum"])


class TaskStatsOut(Schema):
    agent: str
    version: str
    note: str | None = None
    splits: dict = Field(description="train and eval (held-out) tasks: measured, rollouts, pass_rate (mean over "
                         "measured tasks); gap = train - eval")
    tasks: list[dict]


class SampleIn(Schema):
    agent: str = Field(max_length=120)
    k: int = Field(description=f"how many task ids, 1 to {MAX_K:,}")
    strategy: str = "learnable"
    seed: int = Field(0, ge=0, le=2**63 - 1)
    cost_aware: bool = False
    recent: bool = Field(False, description="learnable: weigh by the statistics that forget (each task's last ~32 "
                         "rollouts), so tasks since mastered stop being drawn")


class SampleOut(Schema):
    agent: str
    strategy: str
    tasks: list[str]
    note: str | None = None


def _version(request, slug: str, number: int):
    require(request, "read")
    return version_get(environment=environment_get(team=request.team, slug=slug), number=number, content=True)


@router.get("/environments/{slug}/versions/{number}/tasks/stats", response=TaskStatsOut)
def task_stats(request, slug: str, number: int, agent: str = ""):
    """Per task of the version: the agent's done rollouts of evaluations and sessions, successes, pass rate
    with its 90 % Beta posterior interval, mean return and steps, and a band (too_easy, too_hard,
    learnable, unknown) and split; `splits` sets the agent's training tasks beside its held-out ones (the
    train-eval gap)."""
    version = _version(request, slug, number)
    return services.stats_for(team=request.team, version=version, agent_name=agent)


@router.post("/environments/{slug}/versions/{number}/tasks/sample", response=SampleOut)
def task_sample(request, slug: str, number: int, payload: SampleIn):
    """`k` training task ids for the agent by `strategy` (uniform, learnable, ladder), deterministic given
    the seed and the statistics; eval-split tasks are never served."""
    version = _version(request, slug, number)
    require(request, "run")
    return services.sample_for(team=request.team, version=version, agent_name=payload.agent, k=payload.k,
                               strategy=payload.strategy, seed=payload.seed, cost_aware=payload.cost_aware,
                               recent=payload.recent)
