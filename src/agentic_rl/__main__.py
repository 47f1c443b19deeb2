"""``python -m agentic_rl`` (and ``torchrun -m agentic_rl``): the ``agentic-rl`` command."""

import sys

from agentic_rl.cli import main

sys.exit(main())
