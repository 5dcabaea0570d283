"""Notebook 05, DistributedDataParallel: ``driver`` launches the rank program ``worker`` on the article's recipe;
``checkpoint`` holds its epoch checkpoints.
"""
