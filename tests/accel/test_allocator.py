"""The malloc setting is applied once, on glibc Linux, unless opted out."""

from __future__ import annotations

import sys

import pytest

from agentic_rl.accel import allocator


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(allocator, "_tuned", None)
    return allocator


def test_opt_out_leaves_glibc_defaults(fresh, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_MALLOC_TUNING", "0")
    assert fresh.tune_malloc() is False
    monkeypatch.delenv("AGENTIC_RL_MALLOC_TUNING")
    assert fresh.tune_malloc() is False  # decided once per process


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_applied_on_glibc(fresh, monkeypatch):
    monkeypatch.delenv("AGENTIC_RL_MALLOC_TUNING", raising=False)
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert fresh.tune_malloc() is True
