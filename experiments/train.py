"""`python -m experiments.train` (and `accelerate launch -m experiments.train`): the run's command line, kept short;
the run itself is `experiments.run.train`."""

import sys

from experiments.run.train import main

if __name__ == "__main__":
    sys.exit(main())
