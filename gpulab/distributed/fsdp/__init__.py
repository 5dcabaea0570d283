"""Notebook 08's FSDP2 runs: ``driver`` launches the rank program ``worker``; ``probe`` measures one step's memory.
"""
