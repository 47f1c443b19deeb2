"""cgroup v2 (issue 21, part 2): a delegated subtree gets a child group with memory.max and
pids.max; without one, nothing is created (RLIMIT_NPROC and RLIMIT_AS bound the calls).
A fake hierarchy in a temp dir: the host's cgroups are never touched here."""

from __future__ import annotations

from agentic_rl.sandbox.limits import cgroup_v2_create


def _tree(tmp_path, own: str, delegated: str | None):
    root = tmp_path / "cg"
    (root / own.strip("/")).mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for directory in {root, root / own.strip("/"), (root / own.strip("/")).parent}:
        (directory / "cgroup.subtree_control").write_text(
            "memory pids\n" if delegated and directory == root / delegated.strip("/") else "cpu\n"
        )
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def test_child_group_in_the_delegated_subtree(tmp_path):
    root, proc = _tree(tmp_path, "/user.slice/app.scope", delegated="/user.slice")
    path = cgroup_v2_create("sbx", 256, 32, root=str(root), proc_cgroup=str(proc))
    assert path == str(root / "user.slice" / "sbx")
    assert (root / "user.slice" / "sbx" / "memory.max").read_text() == str(384 * 1024 * 1024)
    assert (root / "user.slice" / "sbx" / "pids.max").read_text() == "36"


def test_no_delegation_no_group(tmp_path):
    root, proc = _tree(tmp_path, "/user.slice/app.scope", delegated=None)
    assert cgroup_v2_create("sbx", 256, 32, root=str(root), proc_cgroup=str(proc)) is None
    assert not (root / "user.slice" / "sbx").exists()
    assert cgroup_v2_create("sbx", 256, 32, root=str(tmp_path / "nothing"), proc_cgroup=str(proc)) is None  # v1 host
