"""A rank that dies midway, for tests/test_dist_train_step.py: `suite.measure.executors.rank` itself, except
that in an fp32 case rank 1 kills itself (SIGKILL, as an out-of-memory killer or a crashed driver
would) at its third training step. The launcher cannot tell it from a real crash."""

import json
import os
import signal
import sys
from pathlib import Path

from suite.measure.executors import rank
from suite.workloads.train_step import workload as train_step

DIE_AT_STEP = 3

if os.environ.get("RANK") == "1" and json.loads((Path(sys.argv[1]) / "case.json").read_text())["case"]["precision"] == "fp32":
    step, calls = train_step.Trainer.step, []

    def dying_step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == DIE_AT_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        return step(self, *args, **kwargs)

    train_step.Trainer.step = dying_step

sys.exit(rank.main(sys.argv[1:]))
