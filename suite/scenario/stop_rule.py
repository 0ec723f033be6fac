"""The timing rule: how a case is timed and when to stop repeating (`StopRule`).

Scenario data, validated when a scenario loads (`[defaults.timing]`, `[sweep.timing]`); the loop
that follows it is `suite.measure.timing.measure`. Torch-free.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


# The warm-up's time limit unless a scenario sets warmup_max_s (a default, not a measurement): long
# enough for a GPU's boost clock to leave idle (an H200 read 345 MHz idle, 1980 MHz after a few
# GEMMs); the GPU scenarios allow 2 s, mamf-finder warms for seconds.
DEFAULT_WARMUP_CAP_S = 1.0

# The whole-case cap unless a scenario sets case_cap_s (first call, warm-up and samples). A normal
# case takes about warm-up + budget (1.5 s with the defaults) and never meets it; it exists for calls
# far slower than the budget assumed: bf16 2048^3 on a CPU without native bf16 took 58 s per call
# against 0.2 s in fp32 (a 2-core AMD EPYC, torch 2.13). A GPU case may be a whole training step.
DEFAULT_CASE_CAP_S = {"cpu": 10.0, "cuda": 30.0}
# Upper bounds of the time settings: a day is more than any case should take, and it keeps the
# arithmetic finite (budget_s = 1e308 overflowed inside the batch sizing).
MAX_SECONDS = 86400.0


class StopRule(BaseModel):
    """How a case is timed and when to stop repeating. Scenario files set it under
    `[defaults.timing]` or `[sweep.timing]`; every field has a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf warm-up never ends

    # Warm-up: run until consecutive batch medians agree (clocks ramped, caches and allocator
    # settled), at least `warmup_s` and `min_warmup` calls, at most `warmup_max_s`.
    warmup_s: float = Field(0.1, ge=0, le=MAX_SECONDS, description="warm up at least this long (seconds)")
    min_warmup: int = Field(2, ge=1, strict=True, description="calls in the first warm-up batch (first call compiles, allocates)")
    warmup_max_s: float | None = Field(
        None, ge=0, le=MAX_SECONDS, description="warm up at most this long, even if not settled (default: 1 s or warmup_s)"
    )
    warmup_tol: float = Field(0.03, gt=0, description="batch medians (and the SM clock) agree within this fraction")
    warmup_agree: int = Field(1, ge=1, strict=True, description="consecutive agreeing batch pairs that end the warm-up")
    # Measurement: stop when the first of these holds (checked after each batch).
    min_samples: int = Field(5, ge=1, strict=True, description="samples taken whatever the budget, while the case cap allows")
    max_samples: int = Field(1000, ge=1, le=1_000_000, strict=True)
    # Stop once the 95% confidence interval of the median is this narrow, relative to the median.
    target_rel_ci: float = Field(0.01, gt=0)
    budget_s: float = Field(1.0, gt=0, le=MAX_SECONDS, description="time for the measured repetitions of one case")
    # The cost bound: calls slower than the budget assumed get fewer samples, never an unbounded case.
    case_cap_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS,
        description="wall-clock cap on the whole case, first call and warm-up included (default: 10 s "
                    "on a CPU, 30 s on CUDA, or twice warm-up cap + budget if that is more)",
    )
    floor_samples: int = Field(
        1, ge=1, strict=True, description="samples kept even when one call exceeds the case cap (the first call counts)"
    )
    # What one repetition is.
    mode: Literal["eager", "cuda_graph"] = Field(
        "eager", description="cuda_graph: capture once, time replays (launch overhead excluded)"
    )
    cache: Literal["auto", "cold", "warm"] = Field(
        "auto", description="cold: flush the cache before each repetition; auto: cold on CUDA, warm on CPU"
    )
    graph_calls: int = Field(1, ge=1, le=10_000, strict=True, description="calls captured per graph replay (cuda_graph, warm cache)")

    @model_validator(mode="after")
    def _consistent(self):
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples ({self.max_samples}) is below min_samples ({self.min_samples})")
        if self.floor_samples > self.min_samples:
            raise ValueError(f"floor_samples ({self.floor_samples}) is above min_samples ({self.min_samples})")
        if self.warmup_max_s is not None and self.warmup_max_s < self.warmup_s:
            raise ValueError(f"warmup_max_s ({self.warmup_max_s}) is below warmup_s ({self.warmup_s})")
        if self.graph_calls > 1 and self.mode != "cuda_graph":
            raise ValueError("graph_calls > 1 needs mode = \"cuda_graph\"")
        if self.graph_calls > 1 and self.cache != "warm":
            # a flush before each replay would make only its first call cold
            raise ValueError("graph_calls > 1 needs cache = \"warm\"")
        return self

    @property
    def warmup_cap_s(self) -> float:
        """The warm-up's time limit (a scenario giving only warmup_s = 2 warms up 2 s at most too)."""
        return self.warmup_max_s if self.warmup_max_s is not None else max(DEFAULT_WARMUP_CAP_S, self.warmup_s)

    def resolved_cache(self, device_type: str) -> str:
        """The cache mode this rule means on a device type: `auto` is cold on CUDA (flushing the L2 is
        cheap) and warm on a CPU (its last-level cache is often hundreds of MiB, and streaming twice
        that through memory before every repetition costs more than most cases take)."""
        if self.cache != "auto":
            return self.cache
        return "cold" if device_type == "cuda" else "warm"

    def case_cap(self, device_type: str) -> float:
        """The whole case's time limit on a device type ("cpu", "cuda"): `case_cap_s` when set, else
        the device's default, raised where the rule's own warm-up and budget need more."""
        if self.case_cap_s is not None:
            return self.case_cap_s
        default = DEFAULT_CASE_CAP_S.get(device_type, DEFAULT_CASE_CAP_S["cpu"])
        return max(default, 2 * (self.warmup_cap_s + self.budget_s))
