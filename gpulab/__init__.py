"""gpulab: small, tested helpers behind the gpulab notebooks.

Importing gpulab is cheap and never needs a GPU or a running Jupyter.
"""

import os

# torch's profiler (kineto) writes "USDT: ... profiler_start" / "profiler_stop" lines to stderr around every
# profile, at any log level up to its highest (5); above it they stay quiet. A value already set is kept,
# and torchrun's ranks inherit it.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

__version__ = "0.1.0"

from gpulab.translation import language as _language  # noqa: E402

if _language() == "zh":  # a kernel of the Chinese edition (notebooks/zh): its plots speak Chinese too
    from gpulab.figures.chinese import use_chinese_plots

    use_chinese_plots()
