"""`python -m gpulab ...` is the same as the `gpulab` console script."""

from gpulab.course.cli import main

raise SystemExit(main())
