"""Notebook 10, when distributed training breaks: ``driver`` launches the rank program ``worker``, which makes
each mistake on purpose; ``ddp_cases`` holds its DDP cases.
"""
