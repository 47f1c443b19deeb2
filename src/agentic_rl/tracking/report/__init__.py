"""``agentic-rl report RUN_DIR``: one self-contained ``report.html`` for a run directory.

It reads only the files a run leaves behind (``metrics.jsonl``, ``sft_metrics.jsonl``,
the eval JSONs, ``rollouts.jsonl``, ``config.yaml``), so it works on finished runs,
on crashed runs and while a run is still writing. Plots are matplotlib PNGs embedded as
base64; there is no JavaScript dependency and no network access, so the file can be
mailed or attached to an issue as is. All model text is HTML-escaped.

Modules: ``run_data`` reads the run directory, ``plots`` draws the training curves,
``tables`` renders the eval / behaviour tables and the threshold warnings, ``episodes``
renders conversations, ``page`` assembles the HTML and writes the file.
"""

from agentic_rl.tracking.report.page import build_report, render_report
from agentic_rl.tracking.report.run_data import NotARunDirectory, RunData, is_run_dir, load_run

__all__ = ["NotARunDirectory", "RunData", "build_report", "is_run_dir", "load_run", "render_report"]
