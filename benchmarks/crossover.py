"""Where more DDP ranks stop helping: see gpulab/distributed/crossover/driver.py (`python benchmarks/crossover.py --help`)."""

import sys

from gpulab.distributed.crossover.driver import main

if __name__ == "__main__":
    sys.exit(main())
