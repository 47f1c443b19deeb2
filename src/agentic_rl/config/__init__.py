"""Typed configuration with validation: a nested section per stage, one home per knob.

Every field has a one-line docstring. Bad values fail with one line naming the key and
what was expected (``ConfigError``), which the CLI prints without a traceback.

``base``: the error type, the section base, shared knob types, building from dicts and
``--set``; ``algorithm``: the RL objective (registered functions with their parameters,
presets, KL, critic, correction); ``rl``: the RL stage's batch and update; ``rewards``:
reward terms (format, tool costs, two-stage schedule, overlong, tool turns); ``renamed``:
the old flat keys and their new homes; ``sinks``: metric
sink names; ``stages``: the SFT, filter, curriculum, DPO and eval stages; ``consistency``: the
cross-section checks; ``sections``: every other section and the roots ``TrainConfig``, ``EvalConfig``;
``resume``: what a resumed run may change; ``secrets``: keeping API keys out of run files.
"""

from agentic_rl.config.algorithm import (
    AdvantageSpec,
    AlgorithmConfig,
    CorrectionConfig,
    CriticConfig,
    GroupFilterSpec,
    KLConfig,
    PolicyLossSpec,
)
from agentic_rl.config.base import (
    ConfigError,
    Section,
    apply_assignments,
    build,
    format_validation_error,
    parse_assignment,
)
from agentic_rl.config.renamed import MOVED
from agentic_rl.config.resume import RESUMABLE_KEYS, resume_config
from agentic_rl.config.rewards import RewardConfig, TwoStageConfig
from agentic_rl.config.rl import ARPOConfig, RLConfig
from agentic_rl.config.secrets import REDACTED, drop_redacted, is_secret_key, redact_secrets, redact_url, redact_urls
from agentic_rl.config.sections import (
    BackendConfig,
    EnvConfig,
    EvalConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    TrackingConfig,
    TrainConfig,
)
from agentic_rl.config.sinks import SINK_PACKAGES, check_sink_names
from agentic_rl.config.stages import (
    CollectConfig,
    CurriculumConfig,
    DPOConfig,
    DPOStageConfig,
    FilterConfig,
    PairCollectConfig,
    RunEvalConfig,
    SFTConfig,
    SFTStageConfig,
)
from agentic_rl.config.trainer import DistributedConfig, TrainerConfig, check_world_size

__all__ = [
    "ARPOConfig",
    "AdvantageSpec",
    "AlgorithmConfig",
    "CorrectionConfig",
    "CriticConfig",
    "GroupFilterSpec",
    "KLConfig",
    "MOVED",
    "PolicyLossSpec",
    "RLConfig",
    "BackendConfig",
    "CollectConfig",
    "ConfigError",
    "DPOConfig",
    "DPOStageConfig",
    "EnvConfig",
    "EvalConfig",
    "CurriculumConfig",
    "FilterConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "PairCollectConfig",
    "REDACTED",
    "RESUMABLE_KEYS",
    "RewardConfig",
    "RolloutConfig",
    "RunEvalConfig",
    "SFTConfig",
    "SFTStageConfig",
    "SINK_PACKAGES",
    "Section",
    "TrackingConfig",
    "TrainConfig",
    "TrainerConfig",
    "TwoStageConfig",
    "DistributedConfig",
    "check_world_size",
    "apply_assignments",
    "build",
    "check_sink_names",
    "drop_redacted",
    "format_validation_error",
    "is_secret_key",
    "parse_assignment",
    "redact_secrets",
    "redact_url",
    "redact_urls",
    "resume_config",
]
