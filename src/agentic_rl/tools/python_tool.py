"""The ``python`` tool: run model-written code in a sandboxed, stateful session.

Each :class:`PythonTool` owns one lazily started :class:`~agentic_rl.sandbox.PythonSession`
(variables persist across calls: the notebook loop). Build one tool per trajectory (envs
are built per trajectory) and call :meth:`PythonTool.close` when it ends; ``ToolEnv.close``
does that. Errors and timeouts of the model's code are observations (``ok=False``), never
exceptions. A failure of the sandbox itself (``ExecutionResult.infra_error``, or a worker
that cannot start) raises :class:`~agentic_rl.sandbox.SandboxError`: the episode records
it as the trajectory's infra error, masked from the loss, instead of scoring the policy
for the machine's fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentic_rl.sandbox import ExecutionResult, Isolation, Limits, PythonSession, SandboxError
from agentic_rl.tools.base import Tool
from agentic_rl.types import ToolCall, ToolResult

__all__ = ["PythonTool", "check_sandbox_for", "format_execution", "truncate_output", "make_python_tool"]

TRUNCATION_MARKER = "\n...[output truncated: {hidden} more characters]...\n"


def truncate_output(text: str, max_chars: int) -> str:
    """Keep the head and the tail of long output with a visible marker in between."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return text[:head] + TRUNCATION_MARKER.format(hidden=len(text) - head - tail) + (text[-tail:] if tail else "")


def format_execution(result: ExecutionResult, *, max_chars: int = 2048, timeout_s: float | None = None) -> str:
    """What the model sees for one run: output, then the error or the limit that stopped it."""
    parts = []
    if result.restarted:
        parts.append("[the previous Python process was lost; variables were reset]")
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append(result.stderr.rstrip("\n"))
    if result.status == "timeout":
        parts.append(f"Error: execution timed out{f' after {timeout_s:g} s' if timeout_s else ''}; variables were lost")
    elif result.status == "memory":
        parts.append("Error: memory limit exceeded")
    elif result.status == "output_limit":
        parts.append("Error: output limit exceeded; the process was stopped")
    elif result.status == "killed":
        parts.append("Error: the process was killed")
    elif result.status == "error" and not result.stderr:
        parts.append(f"Error: exit code {result.exit_code}")
    text = "\n".join(parts) if parts else "(no output)"
    return truncate_output(text, max_chars)


def _python(code: str) -> str:
    """Run Python code in a persistent sandboxed session and return its printed output.

    Variables, imports and functions persist between calls. Use print() to see values.

    Args:
        code: Python source code to execute.
    """
    raise RuntimeError("use PythonTool.invoke")


@dataclass(eq=False)
class PythonTool(Tool):
    """A ``python`` tool bound to one session. ``close()`` releases the session."""

    limits: Limits = field(default_factory=lambda: Limits(timeout_s=5.0, memory_mb=512, max_output_bytes=65536))
    max_output_chars: int = 2048
    stateful: bool = True
    session: PythonSession | None = None

    def _run(self, code: str) -> ExecutionResult:
        if not self.stateful:
            from agentic_rl.sandbox import execute

            limits = self.limits
            return execute(
                code, timeout_s=limits.timeout_s, memory_mb=limits.memory_mb, max_output_bytes=limits.max_output_bytes
            )
        if self.session is None or self.session.closed:
            self.session = PythonSession(self.limits)
        return self.session.run(code)

    def invoke(self, call: ToolCall) -> ToolResult:
        import time

        start = time.perf_counter()
        try:
            arguments = self.validate(call.arguments)
        except Exception as error:
            return ToolResult(
                name=call.name,
                content=f"Error: {error}",
                ok=False,
                call_id=call.id,
                malformed=True,
                latency_s=time.perf_counter() - start,
            )
        try:
            result = self._run(arguments["code"])
        except SandboxError:
            raise
        except Exception as error:
            raise SandboxError(f"sandbox failure: {type(error).__name__}: {error}") from error
        if result.infra_error:
            # Not the policy's doing: the episode turns this into an infra error (masked).
            raise SandboxError(f"sandbox failure: {result.stderr.strip() or result.status}")
        content = format_execution(result, max_chars=self.max_output_chars, timeout_s=self.limits.timeout_s)
        return ToolResult(
            name=call.name,
            content=content,
            ok=result.status == "ok",
            call_id=call.id,
            latency_s=time.perf_counter() - start,
        )

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def make_python_tool(
    *, timeout_s: float = 5.0, memory_mb: int = 512, max_output_chars: int = 2048, stateful: bool = True
) -> PythonTool:
    """A fresh ``python`` tool (one per trajectory: each has its own session)."""
    from agentic_rl.tools.base import tool as to_tool

    template = to_tool(_python, name="python")
    return PythonTool(
        name="python",
        description=template.description,
        parameters=template.parameters,
        fn=_python,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=max(65536, max_output_chars * 4)),
        max_output_chars=max_output_chars,
        stateful=stateful,
    )


def check_sandbox_for(make_env, mode: str = "auto") -> tuple[Isolation, list[str]] | None:
    """At the start of a run: set ``sandbox.isolation`` to ``mode`` and, when the env built by
    ``make_env`` has the python tool, verify the sandbox: ``(isolation, warnings)``, where the
    warnings name what a best-effort sandbox lacks. Raises ``ConfigError`` (one line naming
    the setting) under ``required`` when it is unavailable. None: the env runs no code."""
    import warnings

    from agentic_rl.errors import ConfigError
    from agentic_rl.sandbox import IsolationUnavailable, check_isolation, set_isolation_mode

    set_isolation_mode(mode)
    env = make_env()
    try:
        if not any(isinstance(item, PythonTool) for item in (getattr(env, "tools", None) or ())):
            return None
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            info = check_isolation()
        except IsolationUnavailable as error:
            raise ConfigError(str(error)) from None
    return info, [str(warning.message) for warning in caught]
