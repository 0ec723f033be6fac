"""A synthetic token source whose best achievable loss is known exactly.

The corpus is a first-order Markov chain over the vocabulary, generated in code from a seed (no
download, same tokens on every machine):

    P = (1 - restart) * S + restart * 1 q^T

- `S` is sparse and peaked: each token has `branching` successors, drawn from a Zipf law over the
  vocabulary (so a few tokens are common, like words), with Dirichlet-like weights sharpened by
  `peak` (so one successor usually dominates).
- With probability `restart` the next token is drawn from `q` (the same Zipf law, full support)
  whatever the current token. That makes the chain irreducible and aperiodic (P[i, i] > 0), so it
  has exactly one stationary distribution pi, and it makes pi computable to float64 precision:
  pi = (1 - restart) pi S + restart q is a contraction with factor (1 - restart) in the L1 norm, so
  k iterations from any start leave an error of at most 2 (1 - restart)^k.

Sequences start from pi, so every position has marginal pi and the cross-entropy of any predictor
of x[t+1] from x[..t] is at least the entropy rate

    H = sum_i pi_i H(P[i, :])    (nats; Cover & Thomas, Elements of Information Theory, thm 4.2.4)

which is the floor a trained model's loss approaches. `unigram_entropy` = H(pi) is the loss of a
model that learnt token frequencies but no context: a second landmark on the loss curve.

The dense matrix has V^2 entries (2.5e9 for GPT-2's vocabulary), so nothing here forms it: row
entropies use the sparse part plus a closed form for the restart part (see `entropy_rate`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from suite.core.errors import UserError

# Defaults of the generated source. Branching 4 and peak 2 give an entropy rate of roughly 1-1.5 nats
# against a unigram entropy of several nats at GPT-2's vocabulary: a model has something to learn
# beyond token frequencies. Zipf exponent 1.1: word frequencies in English text follow roughly
# s = 1 (Zipf 1949); slightly above 1 keeps the normaliser finite-tailed at any vocabulary size.
BRANCHING = 4
RESTART = 0.1
ZIPF = 1.1
PEAK = 2.0


def _xlogx(x: torch.Tensor) -> torch.Tensor:
    return torch.special.xlogy(x, x)  # 0 log 0 = 0


@dataclass(frozen=True, eq=False)
class MarkovSource:
    """x[t+1] ~ (1 - restart) * S[x[t]] + restart * q, with S given row-wise by `successors` (V, k)
    and `weights` (V, k; each row sums to 1; a successor may repeat, its weights then add up)."""

    successors: torch.Tensor  # (V, k) int64 token ids
    weights: torch.Tensor  # (V, k) float64
    restart_dist: torch.Tensor  # (V,) float64, sums to 1
    restart: float

    def __post_init__(self):
        v, k = self.successors.shape
        if self.weights.shape != (v, k) or self.restart_dist.shape != (v,):
            raise ValueError(f"shapes disagree: successors {tuple(self.successors.shape)}, "
                             f"weights {tuple(self.weights.shape)}, restart_dist {tuple(self.restart_dist.shape)}")
        if not 0.0 < self.restart <= 1.0:
            raise ValueError(f"restart must be in (0, 1] (it makes the chain ergodic), got {self.restart}")
        if self.successors.min() < 0 or self.successors.max() >= v:
            raise ValueError(f"successor ids must lie in [0, {v})")
        for name, rows in (("weights", self.weights), ("restart_dist", self.restart_dist[None])):
            if (rows < 0).any() or not torch.allclose(rows.sum(-1), torch.ones((), dtype=torch.float64)):
                raise ValueError(f"{name} must be non-negative and each row must sum to 1")

    @property
    def vocab(self) -> int:
        return self.successors.shape[0]

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def random(cls, vocab: int, seed: int = 0, branching: int = BRANCHING, restart: float = RESTART,
               zipf: float = ZIPF, peak: float = PEAK) -> "MarkovSource":
        """The generated source: same arguments, same chain, on any machine (CPU generator)."""
        if vocab < 2:
            raise UserError(f"corpus vocabulary must have at least 2 tokens, got {vocab}")
        if branching < 1:
            raise UserError(f"corpus branching must be at least 1, got {branching}")
        gen = torch.Generator().manual_seed(seed)
        # Token ids get their Zipf rank through a random permutation, so frequent tokens are spread
        # over the id range rather than packed at 0.
        rank_prob = torch.arange(1, vocab + 1, dtype=torch.float64).pow(-zipf)
        rank_prob /= rank_prob.sum()
        token_of_rank = torch.randperm(vocab, generator=gen)
        q = torch.empty(vocab, dtype=torch.float64)
        q[token_of_rank] = rank_prob
        cdf = rank_prob.cumsum(0)
        u = torch.rand(vocab, branching, generator=gen, dtype=torch.float64)
        ranks = torch.searchsorted(cdf, u * cdf[-1]).clamp_(max=vocab - 1)
        successors = token_of_rank[ranks]
        # Exponential(1) draws normalised are Dirichlet(1, ..., 1); a power > 1 sharpens them.
        e = -torch.log1p(-torch.rand(vocab, branching, generator=gen, dtype=torch.float64))
        w = e.pow(peak)
        w /= w.sum(1, keepdim=True)
        return cls(successors, w, q, float(restart))

    # -- exact quantities ---------------------------------------------------------------------

    @functools.cached_property
    def _coalesced(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unique (row, col) entries of S with their summed weights, sorted by row."""
        v, k = self.successors.shape
        key = torch.arange(v).repeat_interleave(k) * v + self.successors.reshape(-1)
        unique, inverse = torch.unique(key, return_inverse=True)
        w = torch.zeros(len(unique), dtype=torch.float64).index_add_(0, inverse, self.weights.reshape(-1))
        return unique // v, unique % v, w

    def dense(self) -> torch.Tensor:
        """The full (V, V) transition matrix. For small vocabularies (tests) only."""
        if self.vocab > 4096:
            raise ValueError(f"a dense {self.vocab}x{self.vocab} matrix is too large; use the sparse methods")
        p = torch.zeros(self.vocab, self.vocab, dtype=torch.float64)
        p.index_put_((torch.arange(self.vocab).repeat_interleave(self.successors.shape[1]),
                      self.successors.reshape(-1)), self.weights.reshape(-1), accumulate=True)
        return (1 - self.restart) * p + self.restart * self.restart_dist[None, :]

    @functools.cached_property
    def stationary(self) -> torch.Tensor:
        """pi with pi P = pi, to float64 precision.

        Iterates pi <- (1 - restart) pi S + restart q, an L1 contraction with factor
        lam = 1 - restart, and stops once the a-posteriori bound of Banach's fixed-point theorem,
        ||pi_k - pi|| <= lam / (1 - lam) ||pi_k - pi_(k-1)||, is below 1e-15 (random sparse chains
        mix much faster than lam alone promises: ~100 iterations at V = 50257). numpy's bincount
        is the sparse product: ~10x faster than torch's index_add_ on a CPU for this size.
        """
        eps = self.restart
        lam = 1.0 - eps
        r, c, w = (t.numpy() for t in self._coalesced)
        q = self.restart_dist.numpy()
        pi = q.copy()
        # The a-priori bound 2 lam^k <= 1e-16 caps the loop: it always terminates.
        cap = 1 if lam == 0 else math.ceil(math.log(1e-16 / 2) / math.log(lam))
        for _ in range(cap):
            new = lam * np.bincount(c, weights=pi[r] * w, minlength=self.vocab) + eps * q
            step = float(np.abs(new - pi).sum())
            pi = new
            if lam == 0 or lam / (1 - lam) * step < 1e-15:
                break
        pi = torch.from_numpy(pi)
        return pi / pi.sum()

    @functools.cached_property
    def row_entropies(self) -> torch.Tensor:
        """H(P[i, :]) in nats for every token i, without forming P.

        P[i, j] = restart q_j off S's support, so with f(x) = x log x
            H_i = -sum_j f(restart q_j) + sum_{j in supp S_i} [f(restart q_j) - f(P[i, j])].
        """
        eps = self.restart
        r, c, w = self._coalesced
        base = eps * self.restart_dist
        p = (1 - eps) * w + base[c]
        correction = torch.zeros(self.vocab, dtype=torch.float64).index_add_(0, r, _xlogx(base[c]) - _xlogx(p))
        return -_xlogx(base).sum() + correction

    @functools.cached_property
    def entropy_rate(self) -> float:
        """The loss floor in nats per token: sum_i pi_i H(P[i, :])."""
        return float((self.stationary * self.row_entropies).sum())

    @functools.cached_property
    def unigram_entropy(self) -> float:
        """H(pi) in nats: the loss of the best predictor that ignores the context."""
        return float(-_xlogx(self.stationary).sum())

    # -- sampling -----------------------------------------------------------------------------

    @functools.cached_property
    def _cdfs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        row_cdf = self.weights.cumsum(1)
        row_cdf[:, -1] = 1.0  # rounding must not leave a gap above the last successor
        q_cdf = self.restart_dist.cumsum(0)
        q_cdf[-1] = 1.0
        return row_cdf, q_cdf, self.stationary.cumsum(0)

    def sample(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """(batch, length) int64 token ids on the CPU; x[:, 0] ~ pi, then the chain."""
        row_cdf, q_cdf, pi_cdf = self._cdfs
        v, k = self.successors.shape
        out = torch.empty(batch, length, dtype=torch.int64)
        u0 = torch.rand(batch, 1, generator=generator, dtype=torch.float64)
        out[:, 0] = torch.searchsorted(pi_cdf, u0 * pi_cdf[-1]).clamp_(max=v - 1)[:, 0]
        jump = torch.rand(batch, length, generator=generator, dtype=torch.float64) < self.restart
        u = torch.rand(batch, length, generator=generator, dtype=torch.float64)
        restart_tokens = torch.searchsorted(q_cdf, u).clamp_(max=v - 1)
        for t in range(1, length):
            cur = out[:, t - 1]
            pick = torch.searchsorted(row_cdf[cur], u[:, t : t + 1].contiguous()).clamp_(max=k - 1)
            follow = self.successors[cur].gather(1, pick)[:, 0]
            out[:, t] = torch.where(jump[:, t], restart_tokens[:, t], follow)
        return out


@functools.lru_cache(maxsize=4)
def generated(vocab: int, seed: int = 0) -> MarkovSource:
    """The suite's corpus for a vocabulary size and seed (cached: building it at V = 50257 and
    finding pi takes a fraction of a second, and a scenario asks for the same one many times)."""
    return MarkovSource.random(vocab, seed)
