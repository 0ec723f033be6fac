"""The dry run's child with one mutant applied (`mutants.MUTANTS[$MPSUITE_TEST_MUTANT]`), started
by `launch.outcomes(..., child_module="tests.gpu_dryrun.mutated_child")` as the real child is:
torch is patched first, then the mutant goes in, then the child runs as ever."""

import os
import sys

from suite.measure.dryrun import FakeGpu, child, fake

if __name__ == "__main__":
    fake.pretend(FakeGpu.parse(os.environ["MPSUITE_DRYRUN_GPU"]))
    from tests.gpu_dryrun.mutants import MUTANTS

    MUTANTS[os.environ["MPSUITE_TEST_MUTANT"]].apply()
    sys.exit(child.main())
