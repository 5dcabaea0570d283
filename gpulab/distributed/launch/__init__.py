"""Starting rank programs: ``torchrun`` runs one torchrun launch with a time limit and no orphans, and ``collect``
launches a rank program and reads what its ranks wrote; ``command`` builds the command, ``result`` reads a finished
or failed launch (naming the rank that failed first), ``processes`` finds and stops the process tree on every OS,
``rendezvous`` says what each OS needs to meet on one machine, ``rank_io`` gives a rank its place, whole output
lines and a clean exit, and ``rendezvous_check`` is the pre-class check's two-rank rendezvous without torchrun.
"""
