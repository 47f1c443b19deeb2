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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_release_memory_hands_the_freed_heap_back(monkeypatch):
    """Tuned, glibc keeps a freed 512 MB block resident; release_memory hands it back, but
    not while the process is under its ``above`` share of the machine's memory."""
    import platform

    import torch

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    monkeypatch.delenv("AGENTIC_RL_MALLOC_TUNING", raising=False)
    assert allocator.tune_malloc() is True
    block = torch.ones(128 << 20)  # 512 MB, every page touched
    held = allocator.resident_bytes()
    del block
    assert allocator.resident_bytes() > held - (64 << 20)  # freed, still resident
    assert allocator.release_memory(above=0.99) == 0  # far below 99% of the machine
    released = allocator.release_memory()
    assert released > 400 << 20 and allocator.resident_bytes() < held - (400 << 20)


def test_release_memory_does_nothing_without_the_tuning(fresh, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_MALLOC_TUNING", "0")
    assert fresh.tune_malloc() is False
    assert fresh.release_memory() == 0
