"""Every column a results file may hold: its type, its unit and what it means. The one place they
are defined: `store.CONTRACT` (the columns every record has) is read from here, `docs/results-schema.md`
is generated from here (`python -m suite.results.columns > docs/results-schema.md`; a test fails
when the page and this table differ), and a test fails when a run writes a column missing here.

Types are as the file stores them: `string`, `int`, `float`, `bool`, `list<float>`, `list<bool>`;
`json` is a string holding JSON; `timestamp` is an Arrow timestamp in microseconds, UTC
(`timestamp[us, tz=UTC]`: pandas reads it as `datetime64[us, UTC]`, DuckDB as TIMESTAMPTZ). Records
on their way to a file (journals are JSON) may hold a timestamp as ISO 8601 text; the store converts
it. Everything but the contract's identity columns may be null (a skipped case has no times; a CPU
has no NVML telemetry).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    unit: str  # "" where the value has none
    description: str
    group: str
    contract: bool = False  # every record has it (workloads and recipes add the rest)


def _group(group: str, contract: bool, *rows: tuple[str, str, str, str]) -> list[Column]:
    return [Column(name, type_, unit, text, group, contract) for name, type_, unit, text in rows]


COLUMNS: list[Column] = [
    *_group(
        "identity", True,
        ("schema_version", "int", "", "results schema version of the row (the file's metadata holds it too)"),
        ("run_id", "string", "", "the run: UTC start time and 24 random bits, e.g. 20261201T091554Z-cbddc1"),
        ("scenario", "string", "", "scenario name: results/<scenario>/, reports/<scenario>/"),
        ("case_id", "string", "", "hash of workload, precision, shape and normalised params: joins across runs"),
        ("baseline_case_id", "string", "", "the case_id of the same case in the baseline precision"),
        ("workload", "string", "", "what was run (registry name, e.g. gemm, train_step)"),
        ("precision", "string", "", "the recipe (registry name, e.g. bf16, fp8_rowwise, te_delayed)"),
        ("baseline", "string", "", "the precision speedups are taken against, in the same run"),
        ("status", "string", "", "ok, skipped (cannot run here) or failed (the error is the reason)"),
        ("reason", "string", "", "why a case was skipped or failed"),
        ("m", "int", "", "GEMM rows of A and C (shaped workloads)"),
        ("k", "int", "", "GEMM inner dimension"),
        ("n", "int", "", "GEMM columns of B and C"),
        ("params", "json", "", "the case's parameters, validated, defaults left out"),
        ("started_at", "timestamp", "µs, UTC", "when the case began"),
    ),
    *_group(
        "timing", True,
        ("time_ms_median", "float", "ms", "median time of one call (one training step, one layer step)"),
        ("time_ms_p10", "float", "ms", "10th percentile of the samples"),
        ("time_ms_p90", "float", "ms", "90th percentile of the samples"),
        ("n_samples", "int", "", "timed repetitions kept"),
        ("samples_ms", "list<float>", "ms", "every timed repetition"),
        ("tflops", "float", "TFLOP/s", "flops / median time"),
        ("peak_tflops", "float", "TFLOP/s", "the vendor's dense peak of this precision on this GPU (null on CPUs)"),
    ),
    *_group(
        "timing", False,
        ("rel_ci", "float", "fraction", "half-width of the median's 95% CI over the median (inf for one sample)"),
        ("rel_spread", "float", "fraction", "IQR over the median of single samples"),
        ("stop_reason", "string", "", "converged, budget, max_samples, or cap (the whole-case cap cut it short)"),
        ("warmup_calls", "int", "", "calls before the timed ones"),
        ("warmup_s", "float", "s", "time spent warming up"),
        ("warmup_reason", "string", "", "settled, cap, or slow (skipped: one call is slow against the case cap)"),
        ("first_call_ms", "float", "ms", "the calibration call, the case's first"),
        ("first_call_kept", "bool", "", "a slow case kept its first call as a sample"),
        ("case_cap_s", "float", "s", "the whole-case cap in force"),
        ("check_s", "float", "s", "the accuracy check's wall time (with the first call, where it is the checked one)"),
        ("case_s", "float", "s", "the whole case's wall time"),
        ("timer", "string", "", "perf_counter (CPU) or cuda_event"),
        ("timing_mode", "string", "", "eager or cuda_graph"),
        ("cache", "string", "", "cold (flushed before each call) or warm"),
        ("flops", "float", "FLOP", "floating-point operations of one call"),
        ("bytes_moved", "float", "B", "bytes one call reads and writes at least"),
        ("gbps", "float", "GB/s", "bytes_moved / median time"),
        ("emulated", "bool", "", "numerics real, speed not (FP8 on a CPU): never shown as speed"),
        ("matmul_flags", "string", "", "the float32 and reduced-precision matmul flags in force during the case"),
    ),
    *_group(
        "accuracy", True,
        ("rel_err", "float", "", "||out - ref|| / ||ref|| against a higher-precision reference, same inputs"),
        ("max_abs_err", "float", "", "largest |out - ref|"),
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
        ("torchao_version", "string", "", "torchao, where installed"),
        ("te_version", "string", "", "Transformer Engine, where installed"),
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
        ("cpu_isa_env", "string", "", "ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA set for the run"),
        ("cpu_threads", "int", "", "torch's intra-op threads during the run"),
        ("cpu_clock_mhz", "float", "MHz", "the CPU's clock: the highest maximum cpufreq reports, else the highest "
                                          "`cpu MHz` in /proc/cpuinfo (a VM's nominal clock); sets its FMA peak"),
        ("threads_setting", "int", "", "the run's `threads` setting (null: torch's default)"),
        ("env_threads", "string", "", "OMP_NUM_THREADS"),
        ("git_dirty", "bool", "", "uncommitted changes in the suite's checkout"),
        ("suite_version", "string", "", "mpsuite's package version"),
        ("code_hash", "string", "", "hash of the suite's source: runs measured by different code differ"),
        ("scenario_description", "string", "", "the scenario's description"),
        ("seed", "int", "", "seed of the case's random inputs"),
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
        ("energy_j", "float", "J", "GPU energy over the timed samples' window (NVML's total energy counter, "
                                   "read before the first sample and after the last)"),
        ("energy_window_s", "float", "s", "the window energy_j was read over (host clock)"),
        ("energy_power_w", "float", "W", "mean board power over that window: energy_j / energy_window_s"),
        ("joules_per_call", "float", "J", "energy of one call: energy_power_w x the median call time"),
        ("joules_per_tflop", "float", "J/TFLOP", "joules_per_call per TFLOP of the call's work (flops / 1e12)"),
    ),
    *_group(
        "roofline model (suite/analysis/model.py, docs/model.md)", False,
        ("predicted_ms", "float", "ms", "the model's time of one call: each kernel at the device's achievable compute "
                                        "or bandwidth, waves and launch floor"),
        ("predicted_speedup", "float", "", "the model's speedup over the baseline precision for this case"),
        ("roofline_ms", "float", "ms", "the least physically possible time: FLOPs at the peak, bytes at full "
                                       "bandwidth (cold cache only), no floor"),
        ("roofline_fraction", "float", "fraction", "roofline_ms / time_ms_median: 1 is the physical limit; above "
                                                   "it the measurement is flagged implausible"),
        ("roofline_tflops", "float", "TFLOP/s", "the compute peak the roofline uses: the GPU's vendor peak, or the "
                                                "CPU's FMA peak of the format (threads x clock x FLOPs/cycle; the "
                                                "fp32 rate where the format has no native kernels)"),
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
        "layers (linear, ln_linear) and outliers", False,
        ("compile_s", "float", "s", "the first (compiling) call of a torch.compile'd case"),
        ("sqnr_grad_input_db", "float", "dB", "SQNR of the input gradient"),
        ("sqnr_grad_weight_db", "float", "dB", "SQNR of the weight gradient"),
        ("rel_err_grad_input", "float", "", "relative error of the input gradient"),
        ("rel_err_grad_weight", "float", "", "relative error of the weight gradient"),
        ("outlier", "float", "", "the planted outlier's magnitude"),
        ("sqnr_db_clean", "float", "dB", "SQNR of the same GEMM without the outlier"),
        ("sqnr_drop_db", "float", "dB", "sqnr_db_clean - sqnr_db: what one outlier costs the other rows"),
    ),
    *_group(
        "fidelity (the suite's timer against a peer)", False,
        ("ref_harness", "string", "", "the peer: torch.utils.benchmark Timer, triton do_bench(_cudagraph)"),
        ("ref_cache", "string", "", "the peer's cache mode"),
        ("ref_mode", "string", "", "the peer's timing mode"),
        ("ref_time_ms_median", "float", "ms", "the peer's median"),
        ("ref_n_samples", "int", "", "the peer's samples"),
        ("ref_calls_per_sample", "int", "", "calls the peer times per sample"),
        ("fidelity_ratio", "float", "", "suite median / peer median"),
    ),
    *_group(
        "training steps (train_step)", False,
        ("model", "string", "", "gpt2 or llama"),
        ("n_layer", "int", "", "transformer blocks"),
        ("n_head", "int", "", "attention heads"),
        ("d_model", "int", "", "model width"),
        ("vocab", "int", "", "the model's vocabulary"),
        ("data_vocab", "int", "", "the synthetic corpus's vocabulary"),
        ("seq_len", "int", "tokens", "tokens per sequence"),
        ("batch", "int", "", "sequences per step"),
        ("tokens_per_step", "int", "tokens", "batch x seq_len"),
        ("n_params", "int", "", "parameters"),
        ("n_matmul_params", "int", "", "parameters in matmuls (what FLOPs count)"),
        ("flops_per_token", "int", "FLOP", "training FLOPs per token (6N + attention)"),
        ("compiled", "bool", "", "torch.compile'd"),
        ("train_steps", "int", "", "steps of the accuracy check"),
        ("tokens_per_s", "float", "tokens/s", "tokens_per_step / median step time"),
        ("mfu", "float", "fraction", "model FLOPs utilisation against the precision's vendor peak (FP8 recipes: "
                                     "the FP8 peak, though lm_head, attention and optimizer stay bf16/fp32)"),
        ("peak_mem_mb", "float", "MiB", "CUDA allocator high-water mark over the check's steps"),
        ("state_mem_mb", "float", "MiB", "parameters, gradients and optimizer state"),
        ("loss_curve", "list<float>", "nats", "loss per step of the check"),
        ("fp32_loss_curve", "list<float>", "nats", "the fp32 reference's loss per step"),
        ("final_loss", "float", "nats", "mean loss of the last steps"),
        ("fp32_final_loss", "float", "nats", "the same for the fp32 reference"),
        ("loss_delta_vs_fp32", "float", "nats", "final_loss - fp32_final_loss"),
        ("loss_rel_delta_vs_fp32", "float", "fraction", "loss_delta_vs_fp32 / fp32_final_loss"),
        ("entropy_floor", "float", "nats", "the corpus's entropy rate: the lowest reachable loss"),
        ("unigram_entropy", "float", "nats", "the corpus's unigram entropy"),
        ("excess_loss", "float", "nats", "final_loss - entropy_floor"),
        ("diverged", "bool", "", "the loss went non-finite or blew up"),
        ("divergence", "string", "", "how it diverged"),
        ("grad_zero_frac", "float", "fraction", "gradient elements exactly zero"),
        ("grad_underflow_frac", "float", "fraction", "gradient elements zero here but not in fp32 (underflow)"),
        ("scaler_skipped_steps", "int", "", "steps a GradScaler skipped (fp16)"),
        ("loss_scale_final", "float", "", "the GradScaler's last scale"),
    ),
    *_group(
        "distributed (dist_train_step: FSDP2 over torchrun ranks)", False,
        ("world_size", "int", "", "ranks of the launch (one GPU each on CUDA)"),
        ("fp8_all_gather", "bool", "", "weights all-gathered in float8 (torchao's enable_fsdp_float8_all_gather)"),
        ("reshard_after_forward", "bool", "", "FSDP2 freed the gathered weights after forward"),
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
    *_group(
        "update precision (train_step)", False,
        ("stuck_update_frac", "float", "fraction", "parameter entries an optimizer step left unchanged, over the "
                                                   "last fifth of the check's steps (updates swamped by the weights' format)"),
        ("fp32_stuck_update_frac", "float", "fraction", "the same for the fp32 reference"),
        ("bytes_per_param", "float", "B", "weights, master copy, gradients and optimizer state per parameter, "
                                          "read off the live tensors at the check's last step"),
        ("bytes_per_param_weights", "float", "B", "the parameters' bytes per parameter (fp32 ones are the master copy)"),
        ("bytes_per_param_master", "float", "B", "a master copy beside the weights (a Kahan compensation buffer "
                                                 "counts here), per parameter"),
        ("bytes_per_param_grads", "float", "B", "gradients per parameter"),
        ("bytes_per_param_optimizer", "float", "B", "optimizer state per parameter (quantized state: codes and scales)"),
        ("textbook_bytes_per_param", "float", "B", "the recipe's bytes per parameter as the textbook counts them "
                                                   "(suite/precisions/update.py)"),
    ),
]

BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
TIMESTAMP_UNIT = "us"  # of every `timestamp` column, which is in UTC
CONTRACT: list[str] = [c.name for c in COLUMNS if c.contract]


def arrow_type(column: Column):
    """The column's Arrow type: every results file has every column with this type (null where a
    record has no value), so pandas, pyarrow, polars and DuckDB read any mix of files as one table."""
    import pyarrow as pa

    return {
        "string": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
        "list<float>": pa.list_(pa.float64()), "list<bool>": pa.list_(pa.bool_()),
        "timestamp": pa.timestamp(TIMESTAMP_UNIT, tz="UTC"),
    }[column.type]


def arrow_schema():
    """The one schema of every results file, units and meanings in each field's metadata."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c), metadata={"unit": c.unit, "description": c.description})
                      for c in COLUMNS])


def schema_markdown() -> str:
    """docs/results-schema.md: one table per group."""
    lines = [
        "# Results schema",
        "",
        "Generated from `suite/results/columns.py` (`python -m suite.results.columns > docs/results-schema.md`);",
        "a test fails when this page and the code differ. One parquet file per run, one row per case;",
        "run metadata is repeated on every row. **Bold** columns are on every record (the contract);",
        "workloads and recipes add the others. `json`: a string holding JSON. `timestamp`: an Arrow",
        f"timestamp, unit `{TIMESTAMP_UNIT}`, zone UTC (pandas `datetime64[{TIMESTAMP_UNIT}, UTC]`, DuckDB `TIMESTAMPTZ`).",
        "",
    ]
    for group in dict.fromkeys(c.group for c in COLUMNS):
        lines += [f"## {group}", "", "| column | type | unit | meaning |", "|---|---|---|---|"]
        for c in (c for c in COLUMNS if c.group == group):
            name = f"**`{c.name}`**" if c.contract else f"`{c.name}`"
            lines.append(f"| {name} | {c.type} | {c.unit} | {c.description.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(schema_markdown(), end="")
