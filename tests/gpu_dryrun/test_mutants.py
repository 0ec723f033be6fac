"""The GPU dry run catches what the CPU tests cannot: each mutant (`mutants.MUTANTS`) breaks one
CUDA-only contract, and the dry run of the cases it touches must fail, naming the contract, while
the same cases dry-run clean without it. Needs torch's CUDA build (`nox -s gpu_dryrun` runs this);
skipped on the CPU build. That the CPU tests pass with each mutant: `mutant_plugin`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if torch.version.cuda is None:
    pytest.skip("the GPU dry run needs torch's CUDA build (nox -s gpu_dryrun)", allow_module_level=True)

from suite.measure import dryrun  # noqa: E402
from suite.measure.dryrun import launch  # noqa: E402
from tests.gpu_dryrun.mutants import MUTANTS  # noqa: E402

CHILD = "tests.gpu_dryrun.mutated_child"


def dry_run(mutant, module=launch.CHILD):
    return list(launch.outcomes(mutant.scenario, None, dryrun.resolve_gpu(mutant.gpu), [mutant.only],
                                child_module=module))


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_dry_run_fails_a_broken_cuda_contract(name, monkeypatch):
    mutant = MUTANTS[name]
    clean = dry_run(mutant)
    assert clean and not [o for o in clean if o.status == "failed"], [o.reason for o in clean]
    monkeypatch.setenv("MPSUITE_TEST_MUTANT", name)
    mutated = dry_run(mutant, CHILD)
    failed = [o for o in mutated if o.status == "failed"]
    assert failed, f"{name}: no case failed; {[(o.status, o.reason[:80]) for o in mutated]}"
    assert all(mutant.contract in o.reason for o in failed), [o.reason for o in failed]
