"""The ``long-qa`` tasks: seeded long documents of invented places with fact sentences, and
the questions asked about those facts.

Task i of a split is the same on every machine. The patterns :data:`FACT_PATTERN` and
:data:`QUESTION_PATTERN` match the fact and question sentences the generator writes.
"""

from __future__ import annotations

import random
import re

from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.rewards.qa import ANSWER_SEPARATOR

__all__ = ["LongQATasks", "FACT_PATTERN", "QUESTION_PATTERN"]

SPLITS = ("train", "test", "demo")
DEFAULT_NUM_TASKS = {"train": 10_000, "test": 1_000, "demo": 16}
MAX_QUESTIONS = 4
FACT_PATTERN = re.compile(r"The ([a-z]+(?: [a-z]+)*) of ([A-Z][a-z]+) is ([A-Za-z0-9]+)\.")
QUESTION_PATTERN = re.compile(r"What is the ([a-z]+(?: [a-z]+)*) of ([A-Z][a-z]+)\?")
_NUMBER_ATTRIBUTES = ["vault code", "harbour number", "bridge count", "founding year", "well depth", "tower height"]
_WORD_ATTRIBUTES = ["guild colour", "oldest tree", "patron animal", "river name", "market day", "festival dish"]
_WORDS = [
    "amber",
    "willow",
    "heron",
    "saffron",
    "granite",
    "otter",
    "cobalt",
    "juniper",
    "falcon",
    "indigo",
    "maple",
    "badger",
    "crimson",
    "thistle",
    "lynx",
    "pewter",
]
_FILLER = [
    "Travellers reaching {a} spoke of {w} fields and {v} roofs.",
    "In {a} the markets opened late and closed early.",
    "Nobody in {a} remembered who had built the old mill.",
    "A letter from {a} described a long {w} winter and a short spring.",
    "Merchants carried {w} cloth from {a} to {b}.",
    "Some said {a} was older than {b}, others disagreed.",
    "Rain fell on {a} for {n} days without pause.",
    "The road between {a} and {b} was quiet that season.",
    "Children in {a} sang about a {w} fox every evening.",
    "A traveller from {b} stayed in {a} for {n} nights.",
    "Fishermen near {a} counted {n} boats at dawn.",
    "Old maps show {a} much closer to {b} than it is.",
]
_ONSETS = [
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "th",
    "v",
    "w",
    "z",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ia", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "rk"]


def _place(rng: random.Random) -> str:
    return (
        "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3))) + rng.choice(_CODAS)
    ).capitalize()


class LongQATasks(GeneratedTasks):
    """A lazy, seeded sequence of long-document tasks (task i is the same on every machine;
    the splits use disjoint seeds)."""

    def __init__(
        self,
        *,
        split: str = "train",
        seed: int = 0,
        num_tasks: int | None = None,
        num_chunks: int = 6,
        chunk_sentences: int = 10,
        num_facts: int = 4,
        num_questions: int = 2,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        for name, value, low in (
            ("num_chunks", num_chunks, 2),
            ("chunk_sentences", chunk_sentences, 3),
            ("num_facts", num_facts, 1),
            ("num_questions", num_questions, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
        if num_facts > 2 * (num_chunks - 1):
            raise ValueError(
                f"num_facts: at most 2 per chunk after the first, so at most {2 * (num_chunks - 1)} with {num_chunks} chunks, got {num_facts}"
            )
        if num_questions > min(num_facts, MAX_QUESTIONS):
            raise ValueError(
                f"num_questions: expected at most min(num_facts, {MAX_QUESTIONS}) = {min(num_facts, MAX_QUESTIONS)}, got {num_questions}"
            )
        self.split, self.seed = split, seed
        self.num_chunks, self.chunk_sentences, self.num_facts, self.num_questions = (
            num_chunks,
            chunk_sentences,
            num_facts,
            num_questions,
        )
        self.size = DEFAULT_NUM_TASKS[split] if num_tasks is None else num_tasks
        if self.size < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")

    def generate(self, index: int) -> Task:
        rng = random.Random(f"long-qa:{self.split}:{self.seed}:{index}")
        places: list[str] = []
        while len(places) < max(8, self.num_facts + 2):
            name = _place(rng)
            if name not in places:
                places.append(name)
        attributes = _NUMBER_ATTRIBUTES + _WORD_ATTRIBUTES
        pairs = rng.sample([(a, p) for a in attributes for p in places[: self.num_facts + 2]], self.num_facts)
        facts = [
            (attribute, place, str(rng.randint(1000, 9999)) if attribute in _NUMBER_ATTRIBUTES else rng.choice(_WORDS))
            for attribute, place in pairs
        ]
        # At most two facts per chunk after the first, at random positions.
        slots = rng.sample([chunk for chunk in range(1, self.num_chunks) for _ in range(2)], self.num_facts)
        chunks: list[list[str]] = []
        for chunk in range(self.num_chunks):
            sentences = [self._filler(rng, places) for _ in range(self.chunk_sentences)]
            here = [fact for fact, slot in zip(facts, slots) if slot == chunk]
            for (attribute, place, value), position in zip(here, rng.sample(range(len(sentences)), len(here))):
                sentences[position] = f"The {attribute} of {place} is {value}."
            chunks.append(sentences)
        asked = rng.sample(facts, self.num_questions)
        questions = [f"What is the {attribute} of {place}?" for attribute, place, _ in asked]
        answers = [value for _, _, value in asked]
        texts = [" ".join(sentences) for sentences in chunks]
        prompt = f"The document has {self.num_chunks} chunks; {self.num_questions} question(s) follow the last one.\n\nChunk 1 of {self.num_chunks}:\n{texts[0]}"
        return Task(
            id=f"long-qa-{self.split}-{self.seed}-{index}",
            prompt=prompt,
            answer=f"{ANSWER_SEPARATOR} ".join(answers),
            metadata={"chunks": texts, "questions": questions, "answers": answers},
        )

    @staticmethod
    def _filler(rng: random.Random, places: list[str]) -> str:
        a, b = rng.sample(places, 2)
        return rng.choice(_FILLER).format(a=a, b=b, w=rng.choice(_WORDS), v=rng.choice(_WORDS), n=rng.randint(2, 40))
