"""Seeds as people write them ("0-9", "1,2,7", "0-4,10") and as pages show them: the one definition
that the run form, the API and the CLI share.

The parser counts before it builds: a text that would name more than `limit` seeds is refused while
it is read, so a short string of many wide ranges never grows the process.
"""

MAX_SEEDS = 10_000
# Each seed is at least one character plus a comma: a longer text cannot be a valid choice of seeds.
MAX_SEEDS_TEXT = 12 * MAX_SEEDS
SEED_MAX = 2**63 - 1
SEEDS_HELP = "A range like 0-9, a list like 1,2,7, or both: 0-4,10."


def _seed(text: str, part: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"{part!r} is not a seed or a range of seeds (e.g. 0-9 or 1,2,7)")
    if len(text) > 19 or int(text) > SEED_MAX:
        raise ValueError(f"seed {text} is too large: seeds are whole numbers from 0 to 2^63-1")
    return int(text)


def parse_seeds(text: str, *, limit: int = MAX_SEEDS) -> list[int]:
    """'0-9' or '1,2,7' or '0-4,10' -> sorted unique seeds; ValueError names what is wrong.

    Ranges are kept as (first, last) pairs and counted as they are read; only a text whose seeds
    add up to at most `limit` is expanded (overlapping ranges count once per range)."""
    text = text or ""
    if len(text) > max(MAX_SEEDS_TEXT, 12 * limit):
        raise ValueError(f"seeds text is longer than {max(MAX_SEEDS_TEXT, 12 * limit)} characters")
    ranges: list[tuple[int, int]] = []
    counted = 0
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, sep, high = part.partition("-")
        first = _seed(low, part)
        last = _seed(high, part) if sep else first
        if last < first:
            raise ValueError(f"seed range {part!r} runs backwards")
        counted += last - first + 1
        if counted > limit:
            raise ValueError(f"more than {limit} seeds")
        ranges.append((first, last))
    if not ranges:
        raise ValueError("give at least one seed, e.g. 0 or 0-9")
    seeds: set[int] = set()
    for first, last in ranges:
        seeds.update(range(first, last + 1))
    return sorted(seeds)


def format_seeds(seeds) -> str:
    """[0, 1, 2, 3, 7] -> '0-3, 7': the inverse of parse_seeds, as pages show a run's seeds."""
    parts, run = [], []
    for seed in sorted(set(seeds)):
        if run and seed == run[-1] + 1:
            run.append(seed)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [seed]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)
