"""The synthetic corpus: its entropy floor against hand-derived and brute-force values, its sampler
against the chain it claims to sample."""

from __future__ import annotations

import math

import pytest
import torch

from suite.core.errors import UserError
from suite.models.corpus import MarkovSource, generated


def h(p: float) -> float:
    """Binary entropy in nats."""
    return -p * math.log(p) - (1 - p) * math.log(1 - p)


def two_state() -> MarkovSource:
    """S swaps the two tokens, q = (1/4, 3/4), restart 0.4, so
        P = 0.6 [[0, 1], [1, 0]] + 0.4 [[1/4, 3/4], [1/4, 3/4]] = [[0.1, 0.9], [0.7, 0.3]].
    A two-state chain with P(0->1) = a, P(1->0) = b has pi = (b, a) / (a + b): here
    a = 0.9, b = 0.7, pi = (0.4375, 0.5625), and the entropy rate is pi_0 h(0.1) + pi_1 h(0.3)."""
    return MarkovSource(
        successors=torch.tensor([[1], [0]]),
        weights=torch.ones(2, 1, dtype=torch.float64),
        restart_dist=torch.tensor([0.25, 0.75], dtype=torch.float64),
        restart=0.4,
    )


def test_two_state_chain_matches_the_hand_derivation():
    src = two_state()
    expected_p = torch.tensor([[0.1, 0.9], [0.7, 0.3]], dtype=torch.float64)
    assert torch.allclose(src.dense(), expected_p, atol=1e-15)
    pi = src.stationary
    # float64 carries ~16 digits; the fixed point is solved to 1e-15 (corpus.stationary)
    assert pi.tolist() == pytest.approx([0.4375, 0.5625], abs=1e-14)
    assert src.entropy_rate == pytest.approx(0.4375 * h(0.1) + 0.5625 * h(0.3), abs=1e-14)
    assert src.unigram_entropy == pytest.approx(h(0.4375), abs=1e-14)


def test_generated_source_agrees_with_dense_brute_force():
    # Branching 8 over 40 tokens drawn from a Zipf law repeats successors within rows, so the
    # coalescing of repeated (row, col) entries is exercised too.
    src = MarkovSource.random(40, seed=3, branching=8)
    assert any(len(set(row.tolist())) < 8 for row in src.successors)
    p = src.dense()
    assert torch.allclose(p.sum(1), torch.ones(40, dtype=torch.float64), atol=1e-14)
    # pi from the linear system pi (P - I) = 0, sum(pi) = 1 (least squares on the stacked system)
    a = torch.cat([(p - torch.eye(40, dtype=torch.float64)).T, torch.ones(1, 40, dtype=torch.float64)])
    b = torch.cat([torch.zeros(40, dtype=torch.float64), torch.ones(1, dtype=torch.float64)])
    pi = torch.linalg.lstsq(a, b[:, None]).solution[:, 0]
    assert torch.allclose(src.stationary, pi, atol=1e-13)
    dense_rate = float(-(pi[:, None] * torch.special.xlogy(p, p)).sum())
    assert src.entropy_rate == pytest.approx(dense_rate, abs=1e-12)
    assert 0 < src.entropy_rate < src.unigram_entropy < math.log(40)


def test_sampler_reproduces_the_two_state_statistics():
    src = two_state()
    x = src.sample(4, 5000, torch.Generator().manual_seed(0))
    n = x.numel()
    # Tolerances: 5 standard deviations. The mean of a two-state chain's indicator has asymptotic
    # variance pi0 pi1 (1 + l) / (1 - l) / n with l = 1 - a - b = -0.6 (second eigenvalue).
    sd_freq = math.sqrt(0.4375 * 0.5625 * 0.4 / 1.6 / n)
    assert float((x == 0).double().mean()) == pytest.approx(0.4375, abs=5 * sd_freq)
    prev, nxt = x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)
    from0 = nxt[prev == 0]
    sd_trans = math.sqrt(0.9 * 0.1 / len(from0))
    assert float((from0 == 1).double().mean()) == pytest.approx(0.9, abs=5 * sd_trans)


def test_oracle_loss_on_samples_is_the_entropy_rate():
    """The cross-entropy of the true transition probabilities on sampled tokens converges to the
    entropy rate: this ties the sampler and the floor together for a generated chain."""
    src = MarkovSource.random(40, seed=5)
    x = src.sample(16, 1000, torch.Generator().manual_seed(1))
    p = src.dense()
    nll = -torch.log(p[x[:, :-1], x[:, 1:]])
    # 5 standard errors of the mean (per-sequence means are independent across the 16 rows; using
    # the per-token spread over the token count instead would understate it only by the chain's
    # short correlation, so it is taken from the 16 sequence means)
    per_seq = nll.mean(1)
    se = float(per_seq.std() / math.sqrt(len(per_seq)))
    assert float(nll.mean()) == pytest.approx(src.entropy_rate, abs=5 * se)


def test_same_seed_same_corpus_other_seed_other_corpus():
    a, b, c = MarkovSource.random(100, seed=7), MarkovSource.random(100, seed=7), MarkovSource.random(100, seed=8)
    assert torch.equal(a.successors, b.successors) and torch.equal(a.weights, b.weights)
    assert a.entropy_rate == b.entropy_rate != c.entropy_rate
    xa = a.sample(2, 50, torch.Generator().manual_seed(0))
    xb = b.sample(2, 50, torch.Generator().manual_seed(0))
    assert torch.equal(xa, xb)
    assert generated(100, 7) is generated(100, 7)  # cached: one build per vocabulary and seed


def test_gpt2_sized_corpus_has_a_floor_well_below_the_unigram_entropy():
    src = generated(50257, 0)
    assert math.isclose(float(src.stationary.sum()), 1.0, abs_tol=1e-12)
    assert bool((src.stationary > 0).all())  # restart has full support: every token recurs
    # Something to learn beyond token frequencies, and a floor far above zero.
    assert 0.5 < src.entropy_rate < src.unigram_entropy - 1.0
    x = src.sample(2, 64, torch.Generator().manual_seed(0))
    assert x.shape == (2, 64) and int(x.min()) >= 0 and int(x.max()) < 50257


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="restart"):
        MarkovSource(torch.tensor([[1], [0]]), torch.ones(2, 1, dtype=torch.float64),
                     torch.tensor([0.5, 0.5], dtype=torch.float64), restart=0.0)
    with pytest.raises(ValueError, match="sum to 1"):
        MarkovSource(torch.tensor([[1], [0]]), torch.full((2, 1), 0.5, dtype=torch.float64),
                     torch.tensor([0.5, 0.5], dtype=torch.float64), restart=0.5)
    with pytest.raises(UserError, match="at least 2 tokens"):
        MarkovSource.random(1)
