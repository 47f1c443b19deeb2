"""Environments: the Env contract, ``ToolEnv``, built-in task families and the registry."""

from agentic_rl.envs.arithmetic import ArithmeticTasks, make_arithmetic_env
from agentic_rl.envs.base import Env, EnvCheckError, Task, check_env
from agentic_rl.envs.registry import UnknownEnvError, accepts_option, make, register, registered
from agentic_rl.envs.tool_env import INVALID_CALL, ToolEnv

register(
    "arithmetic",
    make_arithmetic_env,
    "Multi-operand integer arithmetic solved with the calculator tool; answer in <answer></answer>.",
)

__all__ = [
    "ArithmeticTasks",
    "Env",
    "EnvCheckError",
    "INVALID_CALL",
    "Task",
    "ToolEnv",
    "UnknownEnvError",
    "accepts_option",
    "check_env",
    "make",
    "make_arithmetic_env",
    "register",
    "registered",
]
