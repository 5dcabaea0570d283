"""Notebook 14: what runs on a GPU's cores. Triton kernels, and where they can run.

- :mod:`gpulab.kernels.runtime` decides where the kernels run: compiled on a CUDA GPU, or in Triton's
  interpreter on the CPU (``TRITON_INTERPRET=1``, set before any kernel is defined), or nowhere, with the reason;
- :mod:`gpulab.kernels.programs` holds the kernels (vector add, add + ReLU, softmax over rows, a tiled matrix
  multiply) and the functions that launch them. Each launch runs where its tensors are: CPU tensors in the
  interpreter, CUDA tensors compiled;
- :mod:`gpulab.kernels.traffic` counts what the kernels move: bytes per element, the bytes of the same
  computation done by separate torch operations, a tile's arithmetic intensity;
- :mod:`gpulab.kernels.unmasked` is a program run in a child process: what a store without a mask does;
- :mod:`gpulab.kernels.measure` times the kernels against torch on a GPU (the notebook and
  ``scripts/gpu_measure.py``'s ``triton`` step), and reads what a GPU run recorded.

Only :mod:`runtime` and :mod:`traffic` import without Triton; Triton has wheels for Linux only.
"""
