"""The whole sandbox suite once more as an unprivileged user: the user-namespace mode a
non-root trainer runs in (calls are uid 0 of a user namespace, i.e. the trainer's own
unprivileged host uid, with no capabilities), where file permissions cannot stop a call
from writing what its uid owns.

Runs as root only (it switches to ``UID`` with ``setpriv``), in a private mount namespace
in which any directory on the way to the interpreter, the venv or this checkout that other
users cannot enter (``/root`` with a pyenv interpreter, a ``mktemp -d`` clone) is covered
by a world-readable tmpfs with just those paths bound back: the host is not changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UID = 64000
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="switching to an unprivileged uid needs root (run as non-root, the suite itself is this mode)",
    ),
    pytest.mark.skipif(
        not (shutil.which("unshare") and shutil.which("setpriv")), reason="needs util-linux's unshare and setpriv"
    ),
]

# Runs as root inside `unshare -m`: reopen the blocked directories, then become UID.
WRAPPER = r"""
import os, stat, subprocess, sys, tempfile
uid, needs, command = int(sys.argv[1]), sys.argv[2].split(os.pathsep), sys.argv[3:]
covers = {}  # a directory others cannot enter -> the paths inside it to bind back
for need in needs:
    path = "/"
    for part in os.path.realpath(need).strip("/").split("/"):
        child = os.path.join(path, part)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            covers.setdefault(path, set()).add(child)
            break
        path = child
staged = []
for blocked, children in covers.items():
    for child in sorted(children):
        stage = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        subprocess.run(["mount", "--bind", child, stage], check=True)
        staged.append((stage, child))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", blocked], check=True)
for stage, child in staged:
    os.makedirs(child, exist_ok=True)
    subprocess.run(["mount", "--move", stage, child], check=True)
os.execvp("setpriv", ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", *command])
"""


def _user_namespaces_work() -> bool:
    probe = subprocess.run(
        ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "unshare", "-U", "-r", "true"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.fixture
def home():
    """The user's home (and pytest's base temp dir inside it), in /tmp: pytest's own temp
    dirs are root's and closed to other users."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="agentic-rl-userns-", dir="/tmp"))
    os.chmod(path, 0o755)
    os.chown(path, UID, UID)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_sandbox_suite_passes_as_an_unprivileged_user(home) -> None:
    if not _user_namespaces_work():
        pytest.skip(
            "unprivileged user namespaces are not available here (the sandbox would refuse, or run best-effort, as a non-root user)"
        )
    needs = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), str(ROOT), str(home)]
    others = [str(p) for p in sorted((ROOT / "tests" / "sandbox").glob("test_*.py")) if p.name != Path(__file__).name]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),  # the tree under test
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        f"--basetemp={home / 'pytest'}",
        *others,
    ]
    result = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            WRAPPER,
            str(UID),
            os.pathsep.join(needs),
            *command,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert " passed" in output and " failed" not in output
    # It ran in user-namespace mode: the root-only uid tests skipped for that reason.
    assert (
        "the uid is dropped only when the sandbox starts as root outside a user namespace: namespaces (uid 0;" in output
    )
    assert "unprivileged" in output
