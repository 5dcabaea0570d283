"""gpulab: small, tested helpers behind the gpulab notebooks.

Importing gpulab is cheap and never needs a GPU or a running Jupyter.
"""

__version__ = "0.1.0"
