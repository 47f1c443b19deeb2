"""LLM-as-judge rewards: score parsing, the on-disk cache, failures as infrastructure errors."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentic_rl import envs
from agentic_rl.config import RolloutConfig
from agentic_rl.envs.base import Task
from agentic_rl.rewards.judge import EndpointGrader, EngineGrader, JudgeError, LLMJudge, make_judge, parse_score
from agentic_rl.rollout.episode import Episode
from agentic_rl.types import TrajectoryGroup

TASK = Task(id="t0", prompt="What is the capital of France?", answer="Paris")


class FakeJudgeServer(ThreadingHTTPServer):
    """An OpenAI-compatible /chat/completions that answers with ``reply`` (or fails with ``status``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), JudgeHandler)
        self.reply = "The answer names the right city.\nScore: 8"
        self.status = 200
        self.requests: list[dict] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class JudgeHandler(BaseHTTPRequestHandler):
    server: FakeJudgeServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if self.server.status != 200:
            payload, status = {"error": {"message": "judge overloaded"}}, self.server.status
        else:
            payload, status = (
                {
                    "choices": [
                        {"message": {"role": "assistant", "content": self.server.reply}, "finish_reason": "stop"}
                    ]
                },
                200,
            )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    srv = FakeJudgeServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def endpoint_judge(server: FakeJudgeServer, tmp_path, **kwargs) -> LLMJudge:
    grader = EndpointGrader("grader-model", server.base_url, max_retries=0)
    return LLMJudge(grader, cache_dir=tmp_path / "cache", **kwargs)


def test_parse_score_reads_the_last_score_within_the_scale():
    assert parse_score("Score: 3\nOn reflection... Score: 7", 10) == 0.7
    assert parse_score("score = 4.5", 5) == 0.9
    assert parse_score("**Score:** 10", 10) == 1.0  # markdown bold around the label
    assert parse_score("Score: **10**", 10) == 1.0
    assert parse_score("Score: 11", 10) is None
    assert parse_score("Score: -1", 10) is None
    assert parse_score("looks right to me", 10) is None


def test_endpoint_judge_scores_sends_the_rubric_and_caches_on_disk(server, tmp_path):
    judge = endpoint_judge(server, tmp_path, rubric="10 if it names Paris, else 0.")
    assert judge(" Paris ", TASK) == 0.8
    request = server.requests[0]
    assert request["model"] == "grader-model" and request["temperature"] == 0.0
    prompt = request["messages"][-1]["content"]
    assert (
        "10 if it names Paris, else 0." in prompt
        and "What is the capital of France?" in prompt
        and "Reference answer:\nParis" in prompt
    )
    assert judge(" Paris ", TASK) == 0.8 and len(server.requests) == 1  # the second call is a cache hit
    files = list((tmp_path / "cache").glob("*.json"))
    assert [f.stem for f in files] == [judge.cache_key(TASK.prompt, " Paris ", "Paris")]
    # A new judge (a restarted run) reads the verdict from disk without asking.
    server.reply = "Score: 0"
    assert endpoint_judge(server, tmp_path, rubric="10 if it names Paris, else 0.")(" Paris ", TASK) == 0.8
    assert len(server.requests) == 1
    # Another rubric is another key: the grader is asked.
    assert endpoint_judge(server, tmp_path, rubric="another rubric")(" Paris ", TASK) == 0.0
    assert len(server.requests) == 2


def test_missing_answer_scores_zero_without_a_call(server, tmp_path):
    judge = endpoint_judge(server, tmp_path)
    assert judge(None, TASK) == 0.0 and judge("  ", TASK) == 0.0
    assert server.requests == []


def test_failing_or_unreadable_judge_raises_judge_error(server, tmp_path):
    server.status = 503
    with pytest.raises(JudgeError, match="HTTP 503"):
        endpoint_judge(server, tmp_path)("Paris", TASK)
    server.status, server.reply = 200, "I would rather not say."
    judge = endpoint_judge(server, tmp_path, retries=1)
    calls_before = len(server.requests)
    with pytest.raises(JudgeError, match="no 'Score: N'"):
        judge("Paris", TASK)
    assert len(server.requests) - calls_before == 2  # one retry, then the error; nothing cached
    assert list((tmp_path / "cache").glob("*.json")) == []


def test_failing_judge_in_an_env_is_an_infrastructure_error(server, tmp_path):
    server.status = 500
    options = {"base_url": server.base_url, "model": "grader-model", "cache_dir": str(tmp_path / "c"), "timeout_s": 5.0}
    env = envs.make("search-qa", reward="judge", judge=options, num_tasks=2)
    group = TrajectoryGroup(task_id="0", group_id="g")
    episode = Episode.reset(lambda: env, 0, group, limits=RolloutConfig(), renderer=None, on_finish=None)
    turn, message = episode.take_reply("<answer>Paris</answer>", "stop")
    assert episode.apply_step(turn, lambda: env.step(message)) is False
    trajectory = group.trajectories[0]
    assert trajectory.infra_error is not None and "JudgeError" in trajectory.infra_error
    assert trajectory.reward == 0.0 and trajectory.termination_reason == "error"


def test_judge_reward_in_search_qa(server, tmp_path):
    server.reply = "Score: 5"
    options = {"base_url": server.base_url, "model": "grader-model", "cache_dir": str(tmp_path / "c")}
    env = envs.make("search-qa", reward="judge", judge=options, num_tasks=2)
    env.reset(options={"task_index": 0})
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": "<answer>somewhere</answer>"})
    assert (reward, terminated, info["em"]) == (0.5, True, 0.0)
    assert make_judge(options) is make_judge(dict(options))  # one judge (and cache) per options in a process
    with pytest.raises(ValueError, match="judge: unknown option 'api_key'"):
        make_judge({**options, "api_key": "sk-x"})
    with pytest.raises(ValueError, match="reward 'judge' needs judge options"):
        envs.make("search-qa", reward="judge", num_tasks=2)


def test_engine_grader_runs_a_local_token_backend(tokenizer, tmp_path):
    from agentic_rl.engines.scripted import ScriptedBackend

    backend = ScriptedBackend(tokenizer, ["Looks right.\nScore: 9"])
    judge = LLMJudge(EngineGrader(backend, tokenizer, name="scripted"), cache_dir=tmp_path)
    assert judge("Paris", TASK) == 0.9
    assert judge("Paris", TASK) == 0.9 and backend.calls == 1
    assert "Answer to grade:\nParis" in tokenizer.decode(backend.prompts[0])
