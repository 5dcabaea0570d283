"""Notebook 07's crossover: ``driver`` launches the rank program ``worker`` to find where more DDP ranks stop
helping.
"""
