"""Every column a record may hold: its type, its unit, what it means and the values it may take.
The core columns (what the runner, the machine, telemetry and the model write for any case) are
defined here; the precision and workload folders declare the libraries whose versions every record
holds (one group, `library_columns`), each workload folder the columns it adds
(`suite.scenario.declare`), and `COLUMNS` is all three.

A record is checked against them when it is made (`suite.measure.record.Record`), a results file
when it is written or read (`suite.results.validate`), both from these definitions; they sit in
`measure`, the stage that makes records, so that both can read them. How a file stores them (Arrow
types, the schema page `docs/results-schema.md`) is `suite.results.columns`'; the contract
(`CONTRACT`: the columns every stored record has) is read from here, and a test fails when a run
writes a column missing here.

Types are as the file stores them: `string`, `int`, `float`, `bool`, `list<float>`, `list<bool>`,
`list<string>`;
`json` is a string holding JSON; `timestamp` is a time in UTC (a record holds it as ISO 8601 text, a
file as an Arrow timestamp: `suite.results.columns.TIMESTAMP_UNIT`). Everything but the contract's
identity columns may be null (a skipped case has no times; a CPU has no NVML telemetry).
"""

from __future__ import annotations

from typing import Iterable

from suite.scenario import registry
from suite.scenario.declare import ANY, CALL_MS, LEVEL, RATIO, Column, Range

# Ranges beyond each type's default (`suite.scenario.declare.Column.accepts`): what the arithmetic
# on a column needs, checked before any of it (`suite.measure.record`, `suite.results.validate`).
SHAPE = Range(1.0)  # a GEMM dimension: FLOPs, bytes and the shape's label
AT_LEAST_0 = Range(0.0)  # finite, not negative
PEAK = Range(0.0, above=True)  # a peak rate: what a measured rate is divided by
ERROR = Range(0.0, infinite=True)  # an error norm: inf where the reference is all zeros


def _group(group: str, contract: bool, *rows: tuple) -> list[Column]:
    return [Column(*row[:4], group, contract, row[4] if len(row) > 4 else None) for row in rows]


CORE: list[Column] = [
    *_group(
        "identity", True,
        ("schema_version", "int", "", "results schema version of the row (the file's metadata holds it too)", Range(1.0)),
        ("run_id", "string", "", "the run: UTC start time and 24 random bits, e.g. 20261201T091554Z-cbddc1"),
        ("scenario", "string", "", "scenario name: results/<scenario>/, reports/<scenario>/"),
        ("case_id", "string", "", "hash of workload, precision, shape and normalised params: joins across runs"),
        ("baseline_case_id", "string", "", "the case_id of the same case in the baseline precision"),
        ("workload", "string", "", "what was run (registry name, e.g. gemm, train_step)"),
        ("precision", "string", "", "the recipe (registry name, e.g. bf16, fp8_rowwise, te_delayed)"),
        ("baseline", "string", "", "the precision speedups are taken against, in the same run"),
        ("status", "string", "", "ok, skipped (cannot run here) or failed (the error is the reason)"),
        ("reason", "string", "", "why a case was skipped or failed"),
        ("m", "int", "", "GEMM rows of A and C (shaped workloads)", SHAPE),
        ("k", "int", "", "GEMM inner dimension", SHAPE),
        ("n", "int", "", "GEMM columns of B and C", SHAPE),
        ("params", "json", "", "the case's parameters, validated, defaults left out"),
        ("started_at", "timestamp", "µs, UTC", "when the case began"),
    ),
    *_group(
        "identity", False,
        ("scenario_hash", "string", "", "hash of scenario_spec (sha256, 16 hex digits): runs asked the same share it"),
        ("scenario_spec", "json", "", "what the run was asked: the validated scenario (cases, baselines, seed, "
                                      "timing rules), the device asked for and the case filter (`only`); "
                                      "`python -m suite repro` re-runs it"),
    ),
    *_group(
        "timing", True,
        ("time_ms_median", "float", "ms", "median time of one call (one training step, one layer step)", CALL_MS),
        ("time_ms_p10", "float", "ms", "10th percentile of the samples", CALL_MS),
        ("time_ms_p90", "float", "ms", "90th percentile of the samples", CALL_MS),
        ("n_samples", "int", "", "timed repetitions kept"),
        ("samples_ms", "list<float>", "ms", "every timed repetition"),
        ("tflops", "float", "TFLOP/s", "flops / median time", AT_LEAST_0),
        ("peak_tflops", "float", "TFLOP/s", "the vendor's dense peak of this precision on this GPU (null on CPUs)", PEAK),
    ),
    *_group(
        "timing", False,
        ("rel_ci", "float", "fraction", "half-width of the median's interval over the median, at rel_ci_level: the "
                                        "larger of rel_ci_window and rel_ci_batches, so a level that drifted between "
                                        "batches widens it (inf for one sample); up to issue #38 (rel_ci_level null) "
                                        "McGill's 1.57 IQR / sqrt(n) of both, which covers 88-91% from 30 samples "
                                        "and 68-72% at 3-5"),
        ("rel_ci_window", "float", "fraction", "the same from the samples alone, as if they were independent: half the "
                                               "width of the median's order-statistic interval (exact binomial, at "
                                               "least 95% from 6 samples, 93.75% at 5) over the median (what the "
                                               "spread within the window allows)"),
        ("rel_ci_batches", "float", "fraction", "the same with the batch medians as the replicates (their interval "
                                                "covers 75% with 3 batches, 87.5% with 4, 93.75% with 5, at least 95% "
                                                "from 6): the drift between batches, or paired rounds (null with fewer "
                                                "than 3 batches)"),
        ("rel_ci_level", "float", "fraction", "what rel_ci covers, whether the samples are independent or their "
                                              "level drifts between batches: the lower of the two intervals' levels "
                                              "(0.95 or more from 6 samples and 6 batches), within 2 points from 6 "
                                              "values on; with 3 to 5 (the range) the ± around the middle value "
                                              "covers up to 5 points less (3 values: 0.72-0.73, 0.71 under a long "
                                              "tail, against 0.75); null for runs before issue #38 and for a single "
                                              "sample", LEVEL),
        ("rel_spread", "float", "fraction", "IQR over the median of single samples"),
        ("stop_reason", "string", "", "converged, budget, max_samples, or cap (the whole-case cap cut it short)"),
        ("warmup_calls", "int", "", "calls before the timed ones"),
        ("warmup_s", "float", "s", "time spent warming up"),
        ("warmup_reason", "string", "", "settled, cap, or slow (skipped: one call is slow against the case cap)"),
        ("first_call_ms", "float", "ms", "the calibration call, the case's first"),
        ("first_call_kept", "bool", "", "a slow case kept its first call as a sample"),
        ("case_cap_s", "float", "s", "the whole-case cap in force"),
        ("check_s", "float", "s", "the accuracy check's wall time (with the first call, where it is the checked one)"),
        ("case_s", "float", "s", "the whole case's wall time (a case timed with its setting: the setting's)"),
        ("others_cpus", "float", "CPUs", "CPUs that other processes (and in a VM the hypervisor: steal time) kept busy, "
                                         "on average, while the case's setting was timed: /proc/stat's busy time less "
                                         "this process' own (suite/measure/contention.py; null off Linux)"),
        ("machine_cpus", "int", "", "the CPUs /proc/stat counts: what others_cpus is out of"),
        ("timer", "string", "", "perf_counter (CPU) or cuda_event"),
        ("timing_mode", "string", "", "eager or cuda_graph"),
        ("cache", "string", "", "cold (flushed before each call) or warm"),
        ("flops", "float", "FLOP", "floating-point operations of one call", AT_LEAST_0),
        ("bytes_moved", "float", "B", "bytes one call reads and writes at least", AT_LEAST_0),
        ("gbps", "float", "GB/s", "bytes_moved / median time", AT_LEAST_0),
        ("emulated", "bool", "", "numerics real, speed not (FP8 on a CPU): never shown as speed"),
        ("gemm_path", "string", "", "how a block-scaled recipe's GEMMs ran: torchao-emulated (torchao quantizes, "
                                    "dequantizes to bf16 and multiplies in bf16), qdq-fp32 (torchao's quantize-"
                                    "dequantize around a float32 GEMM, where torchao has no emulated path), "
                                    "torchao-kernel (the format's own GEMM; a GEMM case quantized inline adds "
                                    "+triton-cast for torchao's cast kernels or +eager-cast for its PyTorch "
                                    "quantizer); null for formats multiplied as they are"),
        ("matmul_flags", "string", "", "the float32 and reduced-precision matmul flags in force during the case"),
        ("compile_s", "float", "s", "the first (compiling) call of a torch.compile'd case"),
    ),
    *_group(
        "paired timing (a setting's cases timed together, docs/timing.md)", False,
        ("pairing", "string", "", "paired: its batches were interleaved with those of the other cases of its setting "
                                  "(its baseline, the precisions against it; a fidelity case: its peer harness) in "
                                  "rounds, each round in a seeded random order; alone: its call did not fit a round, so "
                                  "it was timed on its own after the rounds of the others, which stayed paired "
                                  "(pairing_note says why; its speedup is the ratio of medians); sequential: its "
                                  "setting was timed one case after another (pairing_note says why); null: nothing to "
                                  "pair it with"),
        ("pairing_note", "string", "", "why its setting was timed sequentially, or it alone, or why it has no "
                                       "speedup_paired"),
        ("pairing_group", "string", "", "its setting: the smallest case_id of the cases timed together"),
        ("pairing_seed", "int", "", "the seed of the rounds' random order", ANY),
        ("paired_rounds", "int", "", "rounds with a batch of both it and its baseline"),
        ("speedup_paired", "float", "x", "its speedup over its baseline from the paired rounds: the median over the "
                                         "rounds of the baseline's batch median / its own in the same round", RATIO),
        ("speedup_paired_low", "float", "x", "lower end of speedup_paired's interval from the rounds (distribution-"
                                             "free: order statistics of the per-round ratios), at speedup_paired_level",
         RATIO),
        ("speedup_paired_high", "float", "x", "upper end of that interval", RATIO),
        ("speedup_paired_level", "float", "fraction", "that interval's coverage (exact binomial: at least 0.95 from 6 "
                                                      "rounds; with 5 or fewer the rounds' range, 1 - 2^(1-rounds): "
                                                      "1 round 0, 3 rounds 0.75, 5 rounds 0.9375); runs before issue "
                                                      "#38 lack it, and reading them fills it in from paired_rounds",
         LEVEL),
        ("paired_ratios", "list<float>", "x", "the per-round speedups speedup_paired is the median of", RATIO),
    ),
    *_group(
        "kernels (suite/measure/kernels.py)", False,
        ("kernels", "list<string>", "", "every GEMM implementation one untimed call ran, in first-use order: CUDA "
                                        "kernel names from torch.profiler (nvjet_*, sm90_xmma_gemm_*, cutlass::...); "
                                        "on a CPU onednn:<primitive implementation> and mkl:<BLAS call> from the "
                                        "libraries' verbose output, or aten where neither ran a GEMM (torch's own "
                                        "kernel); null where not looked at or not found (kernel_note says why)"),
        ("kernel", "string", "", "the kernels in one line: short names joined by +, e.g. "
                                 "onednn:brg_matmul:avx10_1_512_amx, mkl:sgemm, aten, cuda:nvjet_tst_128x256_64x4_1x2_h_bz_TNT; "
                                 "a long CUDA template name as its head and a hash of the whole"),
        ("kernel_note", "string", "", "why kernels is null: the look was left out (one call costs more than a "
                                      "quarter of the case cap), the profiler could not run, the build has no "
                                      "verbose output"),
    ),
    *_group(
        "accuracy", True,
        ("rel_err", "float", "", "||out - ref|| / ||ref|| against a higher-precision reference, same inputs", ERROR),
        ("max_abs_err", "float", "", "largest |out - ref|", ERROR),
        ("sqnr_db", "float", "dB", "signal-to-quantization-noise ratio, 10 log10(||ref||^2 / ||out - ref||^2)"),
    ),
    *_group(
        "machine", True,
        ("device", "string", "", "cpu or cuda"),
        ("device_name", "string", "", "GPU name, or the CPU model (null where the asked-for GPU is absent)"),
        ("compute_capability", "string", "", "CUDA compute capability, e.g. 9.0"),
        ("torch_version", "string", "", "torch.__version__"),
        ("cuda_version", "string", "", "torch.version.cuda (null for a CPU build)"),
        ("driver_version", "string", "", "NVIDIA driver"),
        ("python_version", "string", "", "Python"),
        ("host", "string", "", "host name"),
        ("git_sha", "string", "", "the suite's commit"),
    ),
    *_group(
        "machine", False,
        ("sm_count", "int", "", "streaming multiprocessors"),
        ("gpu_memory_gb", "float", "GiB", "GPU memory"),
        ("l2_bytes", "int", "B", "GPU L2 cache size"),
        ("torch_git_version", "string", "", "torch.version.git_version"),
        ("cudnn_version", "string", "", "cuDNN"),
        ("triton_version", "string", "", "triton, where installed"),
        ("numpy_version", "string", "", "numpy"),
        ("os", "string", "", "platform.platform()"),
        ("cpu_model", "string", "", "CPU model name"),
        ("cpu_isa", "string", "", "the ISA torch's CPU kernels dispatch to (AVX2, AVX512, ...)"),
        ("cpu_flags", "string", "", "which of avx2 avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 "
                                    "amx_fp16 the CPU has (/proc/cpuinfo)"),
        ("cpu_isa_env", "string", "", "ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS set for the run"),
        ("cpu_threads", "int", "", "torch's intra-op threads during the run"),
        ("cpu_clock_mhz", "float", "MHz", "the CPU's clock: the highest maximum cpufreq reports, else the highest "
                                          "`cpu MHz` in /proc/cpuinfo (a VM's nominal clock); sets its FMA peak"),
        ("threads_setting", "int", "", "the run's `threads` setting (null: torch's default)"),
        ("env_threads", "string", "", "OMP_NUM_THREADS"),
        ("git_dirty", "bool", "", "uncommitted changes in the suite's checkout"),
        ("suite_version", "string", "", "mpsuite's package version"),
        ("code_hash", "string", "", "hash of the source of the stages that decide a measurement (suite/core, "
                                    "scenario, precisions, models, workloads, fleet, measure; "
                                    "suite.measure.env.MEASURING): runs measured by different code differ"),
        ("scenario_description", "string", "", "the scenario's description"),
        ("seed", "int", "", "seed of the case's random inputs", ANY),
        ("label", "string", "", "a label given on import (`import --label`)"),
        ("isolated", "bool", "", "the case ran in its own subprocess (--isolate)"),
        ("isolate_log", "string", "", "start and end of a failed subprocess's log; for a failed case in a CUDA "
                                      "run's worker, the last lines the worker wrote"),
        ("worker_replaced", "bool", "", "this case left its worker process unusable (a sticky CUDA error): "
                                        "the next case ran in a fresh one"),
        ("worker_warnings", "string", "", "warning lines a CUDA run's worker wrote during the case, one per line "
                                          "(a library's fallback or failed load, e.g. torchao's \"Failed to load\")"),
    ),
    *_group(
        "fleet (shards, run groups, executors)", False,
        ("run_group", "string", "", "the fleet run the record belongs to: the group's name and the scenario spec's "
                                    "hash (every shard of one fleet run shares it; readers then give its records "
                                    "one run_id, the group's)"),
        ("run_only", "string", "", "the run's `--only` filters, repeats joined by ' or ' (null: every case of the "
                                   "scenario, or the shard's slice of them)"),
        ("shard_index", "int", "", "this shard's index K, from 0 to shard_count - 1 (`run --shard K/N`)"),
        ("shard_count", "int", "", "shards the run group was cut into (N)"),
        ("shard_run_id", "string", "", "the shard's own run id (its file's name); run_id reads as the group's"),
        ("executor", "string", "", "ray where the Ray executor ran the case (null: the process that journaled it)"),
        ("worker_retries", "int", "", "times the case was started again because its Ray worker died"),
        ("ray_node", "string", "", "the Ray node that ran the case (its node id)"),
    ),
    *_group(
        "telemetry (NVML, CUDA only)", False,
        ("telemetry", "string", "", "nvml where the GPU was sampled"),
        ("telemetry_note", "string", "", "why there is none, or what went wrong"),
        ("telemetry_readings", "int", "", "NVML readings during the timed samples"),
        ("sm_clock_mhz_mean", "float", "MHz", "mean SM clock while timed"),
        ("sm_clock_mhz_min", "float", "MHz", "lowest SM clock while timed"),
        ("sm_clock_max_mhz", "float", "MHz", "the GPU's maximum SM clock"),
        ("mem_clock_mhz_mean", "float", "MHz", "mean memory clock while timed"),
        ("power_w_mean", "float", "W", "mean board power while timed"),
        ("power_w_max", "float", "W", "highest board power while timed"),
        ("power_limit_w", "float", "W", "the board's power limit"),
        ("power_reading", "string", "", "instant (NVML_FI_DEV_POWER_INSTANT) or average (1 s): what power_w_* were read from"),
        ("temp_c_max", "float", "°C", "highest GPU temperature while timed"),
        ("throttled", "bool", "", "any throttle reason (other than idle) while timed"),
        ("throttled_fraction", "float", "fraction", "share of the timed window spent throttled"),
        ("throttle_reasons", "string", "", "the reasons seen, e.g. SwPowerCap"),
        ("samples_throttled", "list<bool>", "", "per sample: throttled while it ran"),
        ("n_samples_throttled", "int", "", "samples taken while throttled"),
        ("energy_j", "float", "J", "GPU energy (NVML's total energy counter) over the energy window: the case's "
                                   "calls back to back after its samples, warm (no cache flush between them), "
                                   "at least 0.5 s"),
        ("energy_window_s", "float", "s", "the window energy_j was read over (host clock)"),
        ("energy_calls", "int", "", "calls the energy window ran"),
        ("energy_power_w", "float", "W", "mean board power over that window: energy_j / energy_window_s"),
        ("joules_per_call", "float", "J", "energy of one call: energy_j / energy_calls"),
        ("joules_per_tflop", "float", "J/TFLOP", "joules_per_call per TFLOP of the call's work (flops / 1e12)"),
    ),
    *_group(
        "roofline model (suite/analysis/roofline/model.py, docs/model.md)", False,
        ("predicted_ms", "float", "ms", "the model's time of one call: each kernel at the device's achievable compute "
                                        "or bandwidth, waves and launch floor"),
        ("predicted_speedup", "float", "", "the model's speedup over the baseline precision for this case", RATIO),
        ("roofline_ms", "float", "ms", "the least physically possible time: FLOPs at the peak, bytes at full "
                                       "bandwidth (cold cache only), no floor"),
        ("roofline_fraction", "float", "fraction", "roofline_ms / time_ms_median: 1 is the physical limit; above "
                                                   "it the measurement is flagged implausible", AT_LEAST_0),
        ("roofline_tflops", "float", "TFLOP/s", "the compute peak the roofline uses: the GPU's vendor peak, or the "
                                                "CPU's FMA peak of the format (threads x clock x FLOPs/cycle; the "
                                                "fp32 rate where the format has no native kernels)", PEAK),
        ("bound", "string", "", "what sets most of the predicted time: compute, memory or overhead (CPUs: compute; "
                                "their memory bandwidth is not in the records)"),
        ("implausible", "string", "", "why the timing cannot be right (faster than physically possible, or a large "
                                      "compute-bound GPU case far below its roofline); null when plausible"),
        ("predicted_gemm_ms", "float", "ms", "the model's time in GEMMs"),
        ("predicted_cast_ms", "float", "ms", "FP8 recipes: the model's time scaling and casting operands"),
        ("measured_gemm_ms", "float", "ms", "layer steps: GEMM time per step from torch.profiler (GPU kernel time; "
                                            "CPU op self time)"),
        ("measured_other_ms", "float", "ms", "layer steps: everything else per step from torch.profiler: FP8 "
                                             "scaling and casting, layout copies, norms, activations"),
    ),
    *_group(
        "launched workloads (torchrun ranks)", False,
        ("slowest_rank", "int", "", "the rank whose median step is the record's time_ms_median"),
        ("rank_time_ms_median", "list<float>", "ms", "each rank's own median step, by rank"),
        ("rank_peak_mem_mb", "list<float>", "MiB", "each rank's CUDA allocator high-water mark, by rank"),
        ("rank_peak_rss_mb", "list<float>", "MiB", "CPU: each rank process's peak resident memory, by rank"),
        ("allgather_bytes_per_step", "int", "bytes", "all-gathered tensors per step and rank (the gathered "
                                                     "output, at its dtype), from torch.profiler"),
        ("reduce_scatter_bytes_per_step", "int", "bytes", "reduce-scattered tensors per step and rank (the "
                                                          "unreduced input), from torch.profiler"),
        ("allgather_ms_per_step", "float", "ms", "all-gather execution per step (NCCL kernels, may overlap "
                                                 "compute; gloo ops on a CPU), slowest rank"),
        ("reduce_scatter_ms_per_step", "float", "ms", "reduce-scatter execution per step, slowest rank"),
        ("allgather_calls_per_step", "int", "", "all-gather calls per step"),
        ("reduce_scatter_calls_per_step", "int", "", "reduce-scatter calls per step"),
        ("collective_timer", "string", "", "what the collective times are: nccl kernels or gloo ops"),
        ("dist_backend", "string", "", "process-group backend: nccl or gloo"),
        ("dist_env", "json", "", "NCCL_*, GLOO_*, TORCH_NCCL_*, OMP_NUM_THREADS ... as the ranks saw them"),
        ("launch_log", "string", "", "a failed launch: the failing rank's log (start and end), else torchrun's"),
    ),
]

# The versions of the libraries the precision and workload folders declare (`registry.libraries`):
# one column each, on every record (null where the library is not installed).
LIBRARY_GROUP = "libraries (declared by the precision and workload folders)"
# Where a list of columns takes the libraries' version columns (`with_libraries`): a page or an
# analysis lists the columns it shows around this, in its order, and never names a library.
LIBRARIES = "<declared libraries>"


def library_columns() -> list[Column]:
    """The declared libraries' version columns, in declaration order (`registry.libraries`)."""
    return [Column(library.column, "string", "", f"{library.title}, where installed", LIBRARY_GROUP, True)
            for library in registry.libraries()]


def with_libraries(names: Iterable) -> list:
    """`names` with `LIBRARIES` replaced by the declared libraries' version columns: a column name by
    each column's name, a (column, title) pair by each (column, the library's title)."""
    out = []
    for item in names:
        if item == LIBRARIES:
            out += [library.column for library in registry.libraries()]
        elif isinstance(item, tuple) and item[0] == LIBRARIES:
            out += [(library.column, library.title) for library in registry.libraries()]
        else:
            out.append(item)
    return out


def library_titles() -> dict[str, str]:
    """Each declared library's version column -> what pages call the library."""
    return {library.column: library.title for library in registry.libraries()}


CONTRACT: list[str] = [c.name for c in CORE + library_columns() if c.contract]
# What a record's `status` may be.
STATUSES = ("ok", "skipped", "failed")


def all_columns() -> list[Column]:
    """The core columns, the declared libraries' and those the workload folders declare
    (`registry.declared_columns`); a folder's column named like a core or a library column is an error."""
    libraries, declared = library_columns(), registry.declared_columns()
    core, versions = {c.name for c in CORE}, {c.name for c in libraries}
    for column in libraries + declared:
        if column.name in core:
            raise ValueError(f"column {column.name!r} is a core column (suite/measure/columns.py): a folder "
                             "cannot declare it")
        if column.name in versions and column not in libraries:
            raise ValueError(f"column {column.name!r} is a declared library's version: a workload cannot declare it")
    return CORE + libraries + declared


def __getattr__(name: str):
    """`COLUMNS` and `BY_NAME` as the registry stands now (a folder added at run time counts)."""
    if name == "COLUMNS":
        return all_columns()
    if name == "BY_NAME":
        return {c.name: c for c in all_columns()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
