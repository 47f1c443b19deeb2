"""``sandbox.isolation`` (issue 21, part 3): required refuses, best-effort warns, naming
what is missing; unavailability is simulated by patching the probe, never by weakening
the machine."""

from __future__ import annotations

import os
import warnings
from types import SimpleNamespace

import pytest

from agentic_rl import sandbox
from agentic_rl.sandbox import policy, worker_process
from agentic_rl.sandbox import pool as pool_module


@pytest.fixture(autouse=True)
def _reset_mode():
    yield
    sandbox.set_isolation_mode(None)
    policy._warned.clear()


def test_required_refuses_with_one_line_naming_the_setting():
    weak = sandbox.Isolation(level="process", caps_dropped=True, uid=65534, unprivileged=True, rlimit_nproc=True)
    with pytest.raises(sandbox.IsolationUnavailable) as caught:
        policy.enforce(weak, "required")
    text = str(caught.value)
    assert (
        "\n" not in text
        and "sandbox.isolation is 'required'" in text
        and "net_ns" in text
        and "pid_ns" in text
        and "best-effort" in text
    )
    assert "caps_dropped" not in text.split(" (set")[0]
    with pytest.warns(RuntimeWarning, match=r"best-effort.*net_ns.*mount_ns"):
        policy.enforce(weak, "best-effort")


def test_the_real_sandbox_here_meets_required_where_namespaces_work():
    info = sandbox.isolation()
    if not info.net_ns:
        pytest.skip(f"no namespaces here: {info.describe()}")
    assert policy.missing(info) == [], info.describe()
    assert sandbox.isolation_mode() == "required"  # auto, where namespaces work
    assert sandbox.check_isolation() == info


def test_a_worker_without_namespaces_is_refused_under_required(monkeypatch):
    monkeypatch.setattr(worker_process, "unshare_prefix", lambda: ((), False))  # as under Docker's seccomp
    before = {name for name in os.listdir("/tmp") if name.startswith("agentic-rl-sandbox-")}
    sandbox.set_isolation_mode("required")
    with pytest.raises(sandbox.IsolationUnavailable, match="sandbox.isolation is 'required'.*net_ns"):
        sandbox.SandboxWorker()
    assert {name for name in os.listdir("/tmp") if name.startswith("agentic-rl-sandbox-")} == before  # nothing left


def test_auto_is_best_effort_where_namespaces_do_not_work(monkeypatch):
    monkeypatch.setattr(worker_process, "unshare_prefix", lambda: ((), False))
    monkeypatch.setattr(policy, "unshare_prefix", lambda: ((), False))
    assert sandbox.isolation_mode() == "best-effort"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sandbox.SandboxWorker() as worker:
            assert worker.run("print(1)", sandbox.Limits(timeout_s=5)).stdout == "1\n"
    assert any("best-effort" in str(w.message) and "net_ns" in str(w.message) for w in caught)


def test_training_refuses_to_start_under_required(monkeypatch, tmp_path):
    """The check runs before the run directory exists (``training.preflight``); the run then
    reports what is missing and writes sandbox.json."""
    from agentic_rl.config import ConfigError
    from agentic_rl.tools.python_tool import check_sandbox_for, make_python_tool
    from agentic_rl.training import pipeline
    from agentic_rl.training.preflight import Preflight
    from agentic_rl.training.run_dir import RunDirectory
    from agentic_rl.training.stages import RunEvents

    weak = sandbox.Isolation(level="process", notes=["unshare: operation not permitted"])
    monkeypatch.setattr(pool_module, "isolation", lambda: weak)
    env = SimpleNamespace(tools=[make_python_tool()], close=lambda: None)
    with pytest.raises(ConfigError, match="sandbox.isolation is 'required'"):
        check_sandbox_for(lambda: env, "required")
    stages = []
    checked = Preflight(lambda: env, [0], check_sandbox_for(lambda: env, "best-effort"), "built-in")
    run = RunDirectory.create(str(tmp_path / "runs"), name="t", config={})
    pipeline._report_sandbox(checked, RunEvents(on_stage=stages.append), run)
    assert any("warning" in line and "net_ns" in line for line in stages), stages
    assert "net_ns" in run.read_json("sandbox.json")["missing"]
    # An env without the python tool never probes the sandbox.
    assert check_sandbox_for(lambda: SimpleNamespace(tools=[]), "required") is None


def test_the_report_warns_about_missing_isolation(tmp_path):
    import json

    from agentic_rl.tracking.report.page import _sandbox_warning

    assert _sandbox_warning(tmp_path) == []
    (tmp_path / "sandbox.json").write_text(
        json.dumps({"mode": "best-effort", "missing": ["net_ns", "pid_ns"], "isolation": {}})
    )
    assert _sandbox_warning(tmp_path) == [
        "sandbox.isolation is 'best-effort': model-written code ran without net_ns, pid_ns"
    ]
    (tmp_path / "sandbox.json").write_text(json.dumps({"mode": "required", "missing": [], "isolation": {}}))
    assert _sandbox_warning(tmp_path) == []


def test_evaluation_refuses_to_start_under_required(monkeypatch):
    from agentic_rl.config import ConfigError, EvalConfig
    from agentic_rl.evaluation import harness
    from agentic_rl.tools.python_tool import make_python_tool

    weak = sandbox.Isolation(level="process")
    monkeypatch.setattr(pool_module, "isolation", lambda: weak)
    env = SimpleNamespace(tools=[make_python_tool()], close=lambda: None)
    with pytest.raises(ConfigError, match="sandbox.isolation is 'required'"):
        harness._check_sandbox(EvalConfig.model_validate({"sandbox": {"isolation": "required"}}), lambda: env)
    with pytest.warns(RuntimeWarning, match="best-effort.*net_ns"):
        harness._check_sandbox(EvalConfig.model_validate({"sandbox": {"isolation": "best-effort"}}), lambda: env)
