"""The suite's timer checked against a peer's (`workload`): the same GEMM timed by both, interleaved."""

from typing import Literal

from pydantic import Field

from suite.scenario.declare import CALL_MS, LEVEL, RATIO, WorkloadRecord, columns
from suite.scenario.params import Params


class FidelityParams(Params):
    """`fidelity`: which peer harness times the same GEMM."""

    harness: Literal["timer", "do_bench", "do_bench_cudagraph"] = Field(
        "timer", description="torch.utils.benchmark's Timer, or triton's do_bench / do_bench_cudagraph")


COLUMNS = columns(
    "fidelity (the suite's timer against a peer)",
    ("ref_harness", "string", "", "the peer: torch.utils.benchmark Timer, triton do_bench(_cudagraph)"),
    ("ref_cache", "string", "", "the peer's cache mode"),
    ("ref_mode", "string", "", "the peer's timing mode"),
    ("ref_time_ms_median", "float", "ms", "the peer's median", CALL_MS),
    ("ref_n_samples", "int", "", "the peer's samples"),
    ("ref_calls_per_sample", "int", "", "calls the peer times per sample"),
    ("fidelity_ratio", "float", "", "the suite's time over the peer's: the median over paired rounds of the suite's "
                                    "batch median / the peer's block median in the same round (the ratio of "
                                    "medians where the two were not interleaved)", RATIO),
    ("fidelity_ratio_low", "float", "", "lower end of fidelity_ratio's interval from the rounds (order statistics "
                                        "of the per-round ratios, at fidelity_ratio_level)", RATIO),
    ("fidelity_ratio_high", "float", "", "upper end of that interval", RATIO),
    ("fidelity_ratio_level", "float", "fraction", "that interval's coverage (exact binomial: at least 0.95 from 6 "
                                                  "rounds; with 5 or fewer the rounds' range, 1 - 2^(1-rounds): 3 "
                                                  "rounds 0.75); null in runs before issue #38: the level follows "
                                                  "from fidelity_rounds", LEVEL),
    ("fidelity_ratio_medians", "float", "", "suite median / peer median over all their samples", RATIO),
    ("fidelity_rounds", "int", "", "paired rounds fidelity_ratio was taken from (0: timed one after the other)"),
)
WORKLOADS = {
    "fidelity": WorkloadRecord("suite.workloads.fidelity.workload:FIDELITY", FidelityParams, shaped=True,
                               roofline="matmul", columns=COLUMNS,
                               case_columns=(("fidelity_ratio", "suite / ref. harness time", ".3f"),),
                               description="a GEMM timed by the suite and by a peer harness"),
}
