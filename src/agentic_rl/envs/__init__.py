"""Environments: the Env contract, ``ToolEnv``, built-in task families and the registry."""

from agentic_rl.envs.arithmetic import ArithmeticTasks, make_arithmetic_env
from agentic_rl.envs.arithmetic_team import make_arithmetic_team_env
from agentic_rl.envs.arithmetic_verify import make_arithmetic_verify_env
from agentic_rl.envs.base import Env, EnvCheckError, Task, check_env
from agentic_rl.envs.code import make_code_env
from agentic_rl.envs.frozenlake import make_frozenlake_env
from agentic_rl.envs.gym_adapter import make_gymnasium_env
from agentic_rl.envs.long_qa import make_long_qa_env
from agentic_rl.envs.math_python import make_gsm8k_env, make_math_python_env
from agentic_rl.envs.mixed import MIX_ENV, MixedEnv, make_mixed_env, mixed_spec_of
from agentic_rl.envs.multi_search import make_multi_search_env
from agentic_rl.envs.registry import (
    UnknownEnvError,
    accepts_option,
    env_factory,
    make,
    name_for,
    register,
    registered,
)
from agentic_rl.envs.search_qa import make_search_qa_env
from agentic_rl.envs.sokoban import make_sokoban_env
from agentic_rl.envs.textworld_env import make_textworld_env
from agentic_rl.envs.tool_env import INVALID_CALL, ToolEnv
from agentic_rl.envs.web_qa import make_web_qa_env

register(
    "arithmetic",
    make_arithmetic_env,
    "Multi-operand integer arithmetic solved with the calculator tool; answer in <answer></answer>.",
)
register(
    "arithmetic-team",
    make_arithmetic_team_env,
    "Two roles: a planner rewrites a word problem as one expression, a solver computes it with the calculator; "
    "credit per role or shared.",
)
register(
    "arithmetic-verify",
    make_arithmetic_verify_env,
    "Two roles: a solver answers a word problem with the calculator, a verifier judges a proposed answer "
    "(half of them right); each rewarded for its own job.",
)
register(
    "search-qa",
    make_search_qa_env,
    "Multi-hop questions over a document collection, answered with a search tool (BM25); EM/F1 reward.",
)
register(
    "math-python",
    make_math_python_env,
    "Math word problems from any JSONL (env.path), sandboxed python tool (hermes or ReTool <code> tags), math-verify reward.",
)
register(
    "gsm8k",
    make_gsm8k_env,
    "GSM8K from env.path (#### answers), sandboxed python tool (hermes or ReTool <code> tags), math-verify reward.",
)
register(
    "frozenlake",
    make_frozenlake_env,
    "FrozenLake text game (RAGEN style): generated lakes with a guaranteed path, one move per turn in <answer></answer>.",
)
register(
    "sokoban",
    make_sokoban_env,
    "Sokoban text game (RAGEN style): generated rooms solvable by reverse play, one move per turn in <answer></answer>.",
)
register(
    "code",
    make_code_env,
    "Write a Python function that passes unit tests (procedural tasks, HumanEval or a JSONL), sandboxed python tool; tests run in a fresh sandbox.",
)
register(
    "long-qa",
    make_long_qa_env,
    "A generated document several times longer than the context, streamed in chunks; bounded memory tools; questions at the end, exact-match reward per question.",
)
register(
    "multi-search-qa",
    make_multi_search_env,
    "Several search-qa questions in one episode (MEM1 multi-objective), answered with the search tool; reward = fraction right.",
)
register(
    "web-qa",
    make_web_qa_env,
    "Questions from a QA JSONL (env.qa_path) researched with web_search (Brave or Tavily API) and browse (main text of a page); EM/F1 reward.",
)
register(
    "textworld",
    make_textworld_env,
    "TextWorld text adventures generated locally (tw-make custom, seeded, cached), one admissible command per turn; score and win reward; needs the [textworld] extra.",
)
register(
    "gymnasium",
    make_gymnasium_env,
    "Any Gymnasium env with a Discrete action space (env_id, env_kwargs), ansi text observations, named actions; needs the [gym] extra.",
)
register(
    MIX_ENV,
    make_mixed_env,
    "Several envs in one run (env.mix: [{name, weight, label, options...}]): tasks drawn by weight, metrics and eval tables per env.",
)

__all__ = [
    "ArithmeticTasks",
    "Env",
    "EnvCheckError",
    "INVALID_CALL",
    "MIX_ENV",
    "MixedEnv",
    "Task",
    "ToolEnv",
    "UnknownEnvError",
    "accepts_option",
    "check_env",
    "env_factory",
    "make",
    "make_arithmetic_env",
    "make_arithmetic_team_env",
    "make_arithmetic_verify_env",
    "make_mixed_env",
    "mixed_spec_of",
    "name_for",
    "register",
    "registered",
]
