"""Notebook 15, long sequences and many experts: ``driver`` launches the rank program ``worker`` once and reads it;
its parts are ``ring`` (ring attention by hand), ``moe`` (a mixture of experts, its experts on ranks) and ``parts``
(what the launch runs with them, and torch's own context parallelism).
"""
