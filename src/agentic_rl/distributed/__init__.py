"""Scale-out: the process group (``DistContext``) and trainer strategies (single, DDP,
FSDP2 on torch.distributed), launched with torchrun (``agentic-rl train --nproc N``)."""

from agentic_rl.distributed.context import DEFAULT_TIMEOUT_S, DistContext, init_distributed, shutdown
from agentic_rl.distributed.strategy import STRATEGIES, Strategy, make_strategy

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "STRATEGIES",
    "DistContext",
    "Strategy",
    "init_distributed",
    "make_strategy",
    "shutdown",
]
