"""Notebook 12, tensor parallelism: ``driver`` launches the rank program ``worker``; its parts are ``parts``
(Megatron's split by hand, DTensor plans, vocabularies) and ``traffic`` (collectives timed and counted).
"""
