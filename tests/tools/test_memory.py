"""Memory tools: the bounded store (caps, lru / fifo forgetting), BM25 search over notes,
per-episode and shared memory, counters, hostile inputs and concurrent writers."""

from __future__ import annotations

import json
import threading

import pytest

from agentic_rl.config import ConfigError
from agentic_rl.envs import env_factory, make
from agentic_rl.tools import (
    MemoryConfig,
    MemoryStore,
    MemoryTools,
    ToolRegistry,
    add_memory_tools,
    get_tool,
    memory_tools,
    shared_store,
)
from agentic_rl.types import ToolCall


def invoke(memory: MemoryTools, name: str, **arguments):
    registry = ToolRegistry(memory.tools)
    return registry.invoke(ToolCall(name=name, arguments=arguments, id="call_0"))


# --------------------------------------------------------------------------- store


def test_write_read_replace_and_automatic_keys():
    store = MemoryStore()
    first = store.write("Paris is the capital of France", "capital")
    assert (first.key, first.replaced, first.evicted, first.notes) == ("capital", False, (), 1)
    assert store.read("capital") == "Paris is the capital of France"
    assert store.read("  capital ") == "Paris is the capital of France"  # surrounding spaces are not part of a key
    again = store.write("Paris, on the Seine", " capital ")
    assert again.replaced and len(store) == 1 and store.chars == len("Paris, on the Seine")
    assert store.read("nope") is None
    assert [store.write("a note").key, store.write("another").key] == ["note-0", "note-1"]
    store.write("taken", "note-2")
    assert store.write("after a taken key").key == "note-3"  # an automatic key never replaces a note
    assert store.keys() == ["capital", "note-0", "note-1", "note-2", "note-3"]


def test_lru_forgets_the_note_used_longest_ago():
    store = MemoryStore(max_notes=3, eviction="lru")
    for key in "abc":
        store.write(f"note {key}", key)
    store.read("a")  # a is now the most recently used
    outcome = store.write("note d", "d")
    assert outcome.evicted == ("b",) and store.keys() == ["c", "a", "d"]
    assert store.search("note c", k=1)[0][0] == "c"  # a search hit is a use too
    assert store.write("note e", "e").evicted == ("a",)
    assert store.evictions == 2


def test_fifo_forgets_the_note_written_longest_ago():
    store = MemoryStore(max_notes=3, eviction="fifo")
    for key in "abc":
        store.write(f"note {key}", key)
    store.read("a")
    store.search("note a", k=1)  # neither reads nor searches change the order
    assert store.write("note d", "d").evicted == ("a",)
    store.write("b again", "b")  # a rewrite is a new write: b moves to the end
    assert store.write("note e", "e").evicted == ("c",)
    assert store.keys() == ["d", "b", "e"]


def test_total_character_cap_forgets_as_many_notes_as_needed():
    store = MemoryStore(max_notes=100, max_chars=100, max_note_chars=100)
    for index in range(5):
        store.write("x" * 20, f"k{index}")
    assert store.chars == 100
    outcome = store.write("y" * 50, "big")
    assert outcome.evicted == ("k0", "k1", "k2")  # 40 + 50 fits, 60 + 50 would not
    assert store.chars == 90 and len(store) == 3
    replaced = store.write("z" * 100, "big")  # replacing frees the old text first
    assert replaced.replaced and store.chars == 100 and store.keys() == ["big"]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "the key is empty"),
        ("   \t ", "the key is empty"),
        ("k" * 65, "the key has 65 characters; a key has at most 64"),
        ("two\nlines", "control or unprintable"),
        ("null\x00byte", "control or unprintable"),
        ("bidi\u202eoverride", "control or unprintable"),
        ("zero\u200bwidth", "control or unprintable"),
    ],
)
def test_unusable_keys_are_refused_and_change_nothing(key, message):
    store = MemoryStore()
    store.write("kept", "kept")
    with pytest.raises(ValueError, match=message):
        store.write("text", key)
    assert store.keys() == ["kept"] and store.chars == 4


def test_unusual_but_printable_keys_work():
    store = MemoryStore()
    keys = [
        "café ключ 東京",
        "emoji 🙂",
        '{"json": [1]}',
        "../../etc/passwd",
        "<tool_call>",
        "k" * 64,
        "DROP TABLE notes;",
    ]
    for index, key in enumerate(keys):
        store.write(f"text {index}", key)
    assert [store.read(key) for key in keys] == [f"text {index}" for index in range(len(keys))]
    assert store.read("CAFÉ ключ 東京") is None  # keys are exact (case-sensitive)


def test_oversized_and_empty_notes_are_refused():
    store = MemoryStore(max_note_chars=50, max_chars=40)
    with pytest.raises(ValueError, match="the note has 41 characters; a note holds at most 40"):
        store.write("x" * 41, "k")  # the smaller of the two caps
    with pytest.raises(ValueError, match="the note is empty"):
        store.write(" \n ", "k")
    assert len(store) == 0 and store.chars == 0


def test_bad_store_options_name_the_option():
    for kwargs, message in [
        ({"max_notes": 0}, "max_notes: expected a positive int, got 0"),
        ({"max_chars": True}, "max_chars: expected a positive int, got True"),
        ({"max_note_chars": 1.5}, "max_note_chars: expected a positive int"),
        ({"eviction": "random"}, "eviction: expected one of lru, fifo, got 'random'"),
    ]:
        with pytest.raises(ValueError, match=message):
            MemoryStore(**kwargs)


# --------------------------------------------------------------------------- search


def test_search_ranks_notes_with_bm25_and_reindexes_after_changes():
    store = MemoryStore()
    store.write("Vexora Dynamics was founded by Ada Brill", "vexora")
    store.write("Ada Brill was born in Kelmore", "brill")
    store.write("The weather was rainy", "weather")
    assert [key for key, _ in store.search("Who founded Vexora Dynamics?", k=3)] == ["vexora"]
    assert [key for key, _ in store.search("Ada Brill", k=2)] == [
        "brill",
        "vexora",
    ]  # the shorter note matches more densely
    assert store.search("volcano", k=3) == []
    store.write("Kelmore lies in Daravia", "kelmore")  # a new note is searchable at once
    assert store.search("Kelmore country", k=1) == [("kelmore", "Kelmore lies in Daravia")]
    store.write("now about volcanoes and lava", "vexora")  # a replaced note is searched by its new text
    assert store.search("Vexora Dynamics founded", k=1) == [
        ("vexora", "now about volcanoes and lava")
    ]  # its key still matches
    assert store.search("volcanoes", k=1)[0][0] == "vexora"


def test_search_matches_keys_and_survives_stopword_only_notes():
    store = MemoryStore()
    store.write("the of and", "the")  # nothing indexable
    assert store.search("the", k=3) == []
    store.write("42", "answer to everything")
    assert store.search("everything", k=3) == [("answer to everything", "42")]
    store.clear()
    assert store.search("everything", k=3) == [] and len(store) == 0


# --------------------------------------------------------------------------- tools


def test_tools_round_trip_and_count_what_happened():
    memory = MemoryTools(MemoryStore(max_notes=2))
    saved = invoke(memory, "memory_write", text="Ada Brill founded Vexora", key="founder")
    assert saved.ok and saved.content == "Saved note 'founder' (24 characters; notes in memory: 1)."
    assert (
        invoke(memory, "memory_write", text="Ada Brill was born in Kelmore").content
        == "Saved note 'note-0' (29 characters; notes in memory: 2)."
    )
    evicting = invoke(memory, "memory_write", text="Kelmore is in Daravia", key="country")
    assert evicting.content.endswith("Memory was full: forgot 'founder'.")
    assert invoke(memory, "memory_read", key="country").content == "Kelmore is in Daravia"
    missing = invoke(memory, "memory_read", key="founder")
    assert (
        not missing.ok
        and missing.content == "Error: ValueError: no note with key 'founder'; keys in memory: 'note-0', 'country'"
    )
    found = invoke(memory, "memory_search", query="born where", k=2)
    assert found.ok and found.content == "[note-0] Ada Brill was born in Kelmore"
    nothing = invoke(memory, "memory_search", query="volcano")
    assert nothing.ok and nothing.content == "No note matches 'volcano'."
    assert memory.metrics() == {
        "memory/writes": 3.0,
        "memory/rejected": 0.0,
        "memory/reads": 2.0,
        "memory/searches": 2.0,
        "memory/hits": 2.0,
        "memory/misses": 2.0,
        "memory/evictions": 1.0,
        "memory/notes": 2.0,
    }


def test_bad_tool_arguments_are_error_observations():
    memory = MemoryTools()
    for name, arguments, expected in [
        ("memory_write", {"text": 5}, "argument 'text' must be string"),
        ("memory_write", {"key": "k"}, "missing required argument 'text'"),
        ("memory_write", {"text": "t", "key": "k", "extra": 1}, "unexpected argument 'extra'"),
        ("memory_search", {"query": "x", "k": 0}, "k must be between 1 and 10, got 0"),
        ("memory_search", {"query": "x", "k": 11}, "k must be between 1 and 10, got 11"),
        ("memory_search", {"query": "  "}, "the query is empty"),
        ("memory_search", {"query": "q" * 1001}, "the query has 1001 characters; a query has at most 1000"),
        ("memory_read", {"key": ""}, "the key is empty"),
    ]:
        result = invoke(memory, name, **arguments)
        assert not result.ok and expected in result.content, (name, arguments, result.content)
    assert memory.metrics()["memory/writes"] == 0.0


def test_a_huge_note_is_an_error_result_and_memory_stays_bounded():
    memory = MemoryTools(MemoryStore(max_note_chars=1000))
    result = invoke(memory, "memory_write", text="x" * 5_000_000, key="huge")
    assert not result.ok
    assert (
        result.content
        == "Error: ValueError: the note has 5000000 characters; a note holds at most 1000. Write a shorter note"
    )
    assert len(memory.store) == 0 and memory.store.chars == 0
    assert memory.metrics()["memory/rejected"] == 1.0 and memory.metrics()["memory/writes"] == 0.0


def test_ten_thousand_writes_hit_the_episode_cap_as_error_results():
    memory = MemoryTools(MemoryStore(max_notes=16, max_chars=10_000), max_writes=64)
    results = [invoke(memory, "memory_write", text=f"fact number {i}", key=f"k{i}") for i in range(10_000)]
    assert all(r.ok for r in results[:64]) and not any(r.ok for r in results[64:])
    assert (
        results[64].content
        == "Error: ValueError: the write limit of this episode is reached (64 notes written); use the notes you have"
    )
    assert len(memory.store) == 16 and memory.store.keys() == [f"k{i}" for i in range(48, 64)]
    metrics = memory.metrics()
    assert (metrics["memory/writes"], metrics["memory/rejected"], metrics["memory/evictions"]) == (64.0, 9936.0, 48.0)
    memory.reset()  # the next episode: a fresh scratch memory and fresh counters
    assert len(memory.store) == 0 and memory.metrics()["memory/writes"] == 0.0
    assert invoke(memory, "memory_write", text="again").ok


def test_refused_writes_do_not_use_the_write_budget():
    memory = MemoryTools(MemoryStore(max_note_chars=10), max_writes=2)
    assert not invoke(memory, "memory_write", text="x" * 11).ok
    assert invoke(memory, "memory_write", text="one").ok and invoke(memory, "memory_write", text="two").ok
    assert not invoke(memory, "memory_write", text="three").ok
    assert memory.metrics()["memory/writes"] == 2.0 and memory.metrics()["memory/rejected"] == 2.0


# --------------------------------------------------------------------------- shared memory


def test_shared_store_outlives_episodes_and_is_keyed_by_name_and_caps():
    caps = {"max_notes": 8, "max_chars": 1000, "max_note_chars": 100, "max_key_chars": 64, "eviction": "fifo"}
    store = shared_store("test-shared-outlives", **caps)
    assert shared_store("test-shared-outlives", **caps) is store
    assert shared_store("test-shared-other", **caps) is not store
    assert shared_store("test-shared-outlives", **{**caps, "max_notes": 9}) is not store
    first = MemoryTools.from_config(MemoryConfig(mode="shared", store="test-shared-outlives", **caps))
    second = MemoryTools.from_config(MemoryConfig(mode="shared", store="test-shared-outlives", **caps))
    assert first.store is store and second.store is store
    assert invoke(first, "memory_write", text="learned in episode one", key="lesson").ok
    first.reset()  # resetting an episode keeps shared notes
    assert invoke(second, "memory_read", key="lesson").content == "learned in episode one"
    assert second.metrics()["memory/hits"] == 1.0 and first.metrics()["memory/writes"] == 0.0


def test_store_state_round_trips_notes_forgetting_order_and_counters():
    store = MemoryStore(max_notes=3, eviction="lru")
    for text in ("one", "two", "three", "four"):  # the fourth write forgets note-0
        store.write(text)
    store.read("note-1")  # lru: note-1 becomes the last to forget
    state = json.loads(json.dumps(store.state_dict()))  # what a checkpoint's state.json holds
    assert state == {
        "notes": [["note-2", "three"], ["note-3", "four"], ["note-1", "two"]],
        "next_auto_key": 4,
        "evictions": 1,
    }
    restored = MemoryStore(max_notes=3, eviction="lru")
    restored.load_state_dict(state)
    assert restored.keys() == store.keys() and restored.chars == store.chars and restored.evictions == 1
    assert restored.search("four") == store.search("four") == [("note-3", "four")]  # a find counts as a use
    restored.write("five")  # the same note is forgotten next, and the next automatic key follows on
    store.write("five")
    assert restored.keys() == store.keys() == ["note-1", "note-3", "note-4"]


def test_a_saved_store_that_breaks_the_caps_is_refused_and_changes_nothing():
    store = MemoryStore(max_notes=2)
    store.write("kept", key="a")
    with pytest.raises(ValueError, match="holds 3 notes"):
        store.load_state_dict({"notes": [["x", "1"], ["y", "2"], ["z", "3"]]})
    with pytest.raises(ValueError, match="the key is empty"):
        store.load_state_dict({"notes": [[" ", "1"]]})
    assert store.keys() == ["a"] and store.read("a") == "kept"


def test_shared_stores_state_restores_every_store_by_name_and_caps():
    from agentic_rl.tools.memory_store import load_shared_stores, shared_stores_state

    caps = {"max_notes": 8, "max_chars": 1000, "max_note_chars": 100, "max_key_chars": 64, "eviction": "fifo"}
    store = shared_store("test-shared-state", **caps)
    store.write("the river is Lonn", key="river")
    saved = [entry for entry in json.loads(json.dumps(shared_stores_state())) if entry["name"] == "test-shared-state"]
    assert saved == [
        {
            "name": "test-shared-state",
            "caps": caps,
            "notes": [["river", "the river is Lonn"]],
            "next_auto_key": 0,
            "evictions": 0,
        }
    ]
    store.clear()
    load_shared_stores(saved)
    assert store.read("river") == "the river is Lonn"


def test_concurrent_writers_readers_and_searchers_keep_the_store_consistent():
    store = MemoryStore(max_notes=50, max_chars=5_000, max_note_chars=200, eviction="lru")
    sessions = [MemoryTools(store, shared=True, max_writes=10_000) for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(sessions))

    def work(index: int, memory: MemoryTools) -> None:
        try:
            registry = ToolRegistry(memory.tools)
            start.wait()
            for i in range(300):
                registry.invoke(
                    ToolCall(
                        "memory_write", {"text": f"writer {index} fact {i} " + "x" * (i % 120), "key": f"w{index}-{i}"}
                    )
                )
                registry.invoke(ToolCall("memory_read", {"key": f"w{(index + 1) % 8}-{i}"}))
                if i % 10 == 0:
                    registry.invoke(ToolCall("memory_search", {"query": f"writer {index} fact", "k": 3}))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(index, memory)) for index, memory in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    keys = store.keys()
    assert len(keys) <= 50 and len(set(keys)) == len(keys)
    assert store.chars == sum(len(store.read(key)) for key in keys) <= 5_000
    writes = sum(m.metrics()["memory/writes"] for m in sessions)
    evictions = sum(m.metrics()["memory/evictions"] for m in sessions)
    assert writes == 8 * 300 and evictions == store.evictions == writes - len(
        keys
    )  # every key is new: each write that did not stay was forgotten
    reads = sum(m.metrics()["memory/reads"] for m in sessions)
    searches = sum(m.metrics()["memory/searches"] for m in sessions)
    hits_and_misses = sum(m.metrics()["memory/hits"] + m.metrics()["memory/misses"] for m in sessions)
    assert reads == 8 * 300 and searches == 8 * 30 and hits_and_misses == reads + searches


def test_concurrent_calls_of_one_episode_never_pass_its_write_cap():
    memory = MemoryTools(MemoryStore(max_notes=1000, max_chars=100_000), max_writes=100)
    registry = ToolRegistry(memory.tools)
    results = []
    lock = threading.Lock()

    def work(index: int) -> None:
        for i in range(50):
            result = registry.invoke(ToolCall("memory_write", {"text": f"note {index} {i}"}))
            with lock:
                results.append(result.ok)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == 100 and len(memory.store) == 100
    assert memory.metrics()["memory/writes"] == 100.0 and memory.metrics()["memory/rejected"] == 700.0
    assert len(set(memory.store.keys())) == 100  # automatic keys are unique under concurrency


# --------------------------------------------------------------------------- the env option


def test_memory_option_values():
    assert memory_tools(None) is None and memory_tools("none") is None and memory_tools(False) is None
    assert not memory_tools(True).shared and not memory_tools("episode").shared
    assert memory_tools("shared").shared
    custom = memory_tools({"mode": "episode", "max_notes": 3, "eviction": "fifo", "max_writes": 5})
    assert (custom.store.max_notes, custom.store.eviction, custom.max_writes) == (3, "fifo", 5)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("forever", "memory: expected one of none, episode, shared (or a mapping with 'mode'), got 'forever'"),
        (3, "memory: expected one of none, episode, shared or a mapping, got 3"),
        ({"mode": "shared", "max_notes": 0}, "memory.max_notes: expected a positive int, got 0"),
        ({"mode": "episode", "max_writes": "many"}, "memory.max_writes: expected a positive int, got 'many'"),
        ({"mode": "episode", "eviction": "random"}, "memory.eviction: expected one of lru, fifo, got 'random'"),
        ({"mode": "episode", "size": 3}, "memory: unknown key 'size'; expected keys: mode, max_notes"),
        ({"mode": "shared", "store": ""}, "memory.store: expected a non-empty name"),
    ],
)
def test_bad_memory_options_fail_in_one_line_naming_the_option(value, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        make("arithmetic", memory=value)
    with pytest.raises(ConfigError, match="^env: memory"):
        env_factory("search-qa", {"memory": value})


def test_tag_formats_that_call_one_tool_refuse_memory():
    with pytest.raises(
        ValueError, match="^memory: the search_r1 call format cannot call the memory tools; use parser hermes$"
    ):
        make("search-qa", parser="search_r1", memory="episode")


def test_add_memory_tools_to_a_registry_of_your_own():
    registry = ToolRegistry([get_tool("calculator")])
    memory = add_memory_tools(registry, "episode")
    assert registry.names() == ["calculator", "memory_write", "memory_read", "memory_search"]
    assert (
        registry.invoke(ToolCall("memory_write", {"text": "kept", "key": "k"})).ok and memory.store.read("k") == "kept"
    )
    assert add_memory_tools(ToolRegistry(), "none") is None


def _hermes(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_arithmetic_env_with_episode_memory_reports_memory_metrics():
    env = make("arithmetic", memory="episode", max_turns=6)
    assert env.tools.names() == ["calculator", "memory_write", "memory_read", "memory_search"]
    assert "memory_search" in env.system_prompt
    env.reset(options={"task_index": 0})
    task = env.task
    observations, *_ = env.step(
        {
            "role": "assistant",
            "content": _hermes("memory_write", text=f"expression {task.metadata['expression']}", key="todo"),
        }
    )
    assert (
        observations[0]["content"]
        == "<tool_response>\nSaved note 'todo' ("
        + str(len("expression " + task.metadata["expression"]))
        + " characters; notes in memory: 1).\n</tool_response>"
    )
    observations, *_ = env.step(
        {
            "role": "assistant",
            "content": _hermes("memory_read", key="todo") + _hermes("memory_search", query="expression"),
        }
    )
    assert [o["content"].count(task.metadata["expression"]) for o in observations] == [1, 1]
    *_, reward, terminated, _, _ = env.step({"role": "assistant", "content": f"<answer>{task.answer}</answer>"})
    assert terminated and reward == 1.0
    metrics = env.episode_metrics()
    assert (metrics["memory/writes"], metrics["memory/reads"], metrics["memory/searches"], metrics["memory/hits"]) == (
        1.0,
        1.0,
        1.0,
        2.0,
    )
    env.reset(options={"task_index": 1})  # a new episode starts with an empty scratch memory
    assert len(env.memory.store) == 0 and env.episode_metrics()["memory/notes"] == 0.0
    assert make("arithmetic").episode_metrics() == {}  # without memory (or reflection): nothing reported


def test_search_qa_with_shared_memory_carries_notes_across_episodes():
    options = {"split": "test", "num_tasks": 4, "memory": {"mode": "shared", "store": "test-search-qa-carry"}}
    first, second = make("search-qa", **options), make("search-qa", **options)  # envs are built per episode
    first.reset(options={"task_index": 0})
    first.step(
        {
            "role": "assistant",
            "content": _hermes("memory_write", text="Vexora Dynamics founded by Ada Brill", key="vexora"),
        }
    )
    first.step({"role": "assistant", "content": "<answer>x</answer>"})
    second.reset(options={"task_index": 1})
    observations, *_ = second.step({"role": "assistant", "content": _hermes("memory_search", query="Vexora founder")})
    assert (
        observations[0]["content"] == "<tool_response>\n[vexora] Vexora Dynamics founded by Ada Brill\n</tool_response>"
    )
    metrics = second.episode_metrics()
    assert metrics["memory/hits"] == 1.0 and metrics["memory/writes"] == 0.0 and "search/em" in metrics
    assert second.queries == []  # memory calls are not searches


def test_memory_tools_option_offers_only_the_named_tools():
    memory = memory_tools({"mode": "episode", "tools": ["memory_write", "memory_read"]})
    assert [item.name for item in memory.tools] == ["memory_write", "memory_read"]
    assert [item.name for item in memory_tools("episode").tools] == ["memory_write", "memory_read", "memory_search"]
    env = make("long-qa", memory={"mode": "episode", "tools": ["memory_write", "memory_read"]})
    assert env.tools.names() == ["memory_write", "memory_read"]
    prompt = env.reset(options={"task_index": 0})[0][0]["content"]
    assert "memory_search" not in prompt and "look your notes up (memory_read)" in prompt
    assert "(memory_read or memory_search)" in make("long-qa").reset(options={"task_index": 0})[0][0]["content"]
    with pytest.raises(ValueError, match="^memory.tools: long-qa needs memory_write and memory_read"):
        make("long-qa", memory={"mode": "episode", "tools": ["memory_write", "memory_search"]})


@pytest.mark.parametrize("value", [[], ["memory_forget"], ["memory_read", "memory_read"], 3])
def test_bad_memory_tools_option_names_the_field(value):
    with pytest.raises(
        ValueError,
        match=r"^memory.tools: expected a non-empty list of distinct names from memory_write, memory_read, memory_search",
    ):
        make("arithmetic", memory={"mode": "episode", "tools": value})
