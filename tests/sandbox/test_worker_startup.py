"""The worker script and its helper scripts: what the sandboxed code inherits from the start-up."""

from __future__ import annotations

import json
import os

from agentic_rl import sandbox
from agentic_rl.sandbox.worker_process import WORKER_SCRIPT


def test_sandboxed_code_does_not_see_the_worker_bootstrap():
    # The worker puts its own directory on sys.path only while importing its helper scripts,
    # and lifts -B only for those imports: the code it runs sees neither.
    code = "import json, sys\nprint(json.dumps([sys.path, sys.dont_write_bytecode, sorted(m for m in sys.modules if m.startswith('agentic_rl'))]))"
    result = sandbox.execute(code, timeout_s=10)
    assert result.status == "ok", result
    path, dont_write_bytecode, package_modules = json.loads(result.stdout)
    assert os.path.dirname(WORKER_SCRIPT) not in path
    assert dont_write_bytecode is True
    assert package_modules == []  # the worker never imports the agentic_rl package
