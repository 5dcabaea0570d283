"""Notebook 08, memory and sharding: what a model costs in bytes before it is allocated (``estimate``), a step of
FSDP2 walked unit by unit (``fsdp_memory``) and activation checkpointing measured (``checkpointing``).
"""
