"""A pytest plugin applying one mutant (`mutants.MUTANTS[$MPSUITE_TEST_MUTANT]`) before the tests
run, to show that the CPU tests pass with it:
    MPSUITE_TEST_MUTANT=row_major_b pytest -p tests.gpu_dryrun.mutant_plugin tests/test_fp8.py"""

import os


def pytest_configure(config):
    from tests.gpu_dryrun.mutants import MUTANTS

    MUTANTS[os.environ["MPSUITE_TEST_MUTANT"]].apply()
