"""A whole run: plan a scenario, run its cases, store the records, render the report.

The only module that ties runner (measure), store (results/) and report (reports/) together; the
CLI and the nox sessions call `run_scenario`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from suite import env, plan, report, runner, store
from suite.errors import UserError
from suite.spec import Scenario


@dataclass
class RunResult:
    run_id: str
    path: Path
    records: list[dict]
    report_files: list[Path]

    @property
    def failed(self) -> int:
        return sum(r["status"] == "failed" for r in self.records)


def run_scenario(
    scenario: Scenario,
    results_dir: str | Path = "results",
    reports_dir: str | Path | None = "reports",
    device: str | None = None,
    progress: bool = True,
) -> RunResult:
    cases = plan.expand(scenario)
    dev = env.resolve_device(device or scenario.defaults.device)
    if dev.type == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"scenario {scenario.name!r} asks for device 'cuda' but torch.cuda is not available")
    run_id = store.new_run_id()
    meta = {"run_id": run_id, **env.capture(dev)}
    print(f"mpsuite: {scenario.name}: {len(cases)} cases on {meta['device_name']} "
          f"(torch {meta['torch_version']}), run {run_id}", file=sys.stderr)
    bar = runner.Progress(len(cases)) if progress else None
    records = list(runner.run(cases, dev, meta, bar))
    path = store.write_run(records, store.run_path(results_dir, scenario.name, run_id))
    print(f"mpsuite: wrote {path}", file=sys.stderr)
    written: list[Path] = []
    if reports_dir is not None:
        written = report.render(store.read_file(path), Path(reports_dir) / scenario.name)
        print(f"mpsuite: report in {Path(reports_dir) / scenario.name}/", file=sys.stderr)
    return RunResult(run_id, path, records, written)
