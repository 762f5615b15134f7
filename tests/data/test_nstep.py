"""n-step transitions against a brute-force computation, across time-outs, terminations and env ids."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mbpo.data.nstep import DISCOUNT, NStepBuilder
from mbpo.data.transitions import ACTION, NEXT_OBS, NEXT_OBS_VALID, OBS, REWARD, TERMINATED

pytestmark = pytest.mark.timeout(60)


def stream(num_envs: int, steps: int, seed: int) -> list[tuple[TensorDict, torch.Tensor]]:
    """Random 1-step transitions; obs encodes (env, t), episodes end by termination or time-out at random."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in range(steps):
        ids = torch.arange(num_envs, dtype=torch.float32)
        u = torch.rand(num_envs, generator=gen)
        terminated, truncated = u < 0.1, (u >= 0.1) & (u < 0.2)
        out.append((TensorDict({
            OBS: torch.stack([ids, torch.full((num_envs,), float(t))], -1),
            ACTION: torch.rand(num_envs, 1, generator=gen), REWARD: torch.randn(num_envs, generator=gen),
            NEXT_OBS: torch.stack([ids, torch.full((num_envs,), t + 0.5)], -1), TERMINATED: terminated,
            NEXT_OBS_VALID: torch.ones(num_envs, dtype=torch.bool)}, [num_envs]), truncated))
    return out


def brute_force(data: list[tuple[TensorDict, torch.Tensor]], n: int, gamma: float) -> dict[tuple[int, int], tuple]:
    """(env, start t) -> (return, next_obs time, terminated, discount), env by env, step by step."""
    expected = {}
    num_envs, steps = data[0][0].shape[0], len(data)
    for e in range(num_envs):
        for start in range(steps):
            ret, end = 0.0, None
            for m in range(1, n + 1):
                t = start + m - 1
                if t >= steps:
                    break
                step, truncated = data[t]
                ret += gamma ** (m - 1) * float(step[REWARD][e])
                if bool(step[TERMINATED][e]) or bool(truncated[e]) or m == n:
                    end = (m, t, bool(step[TERMINATED][e]))
                    break
            if end is not None:  # else its window is still open at the end of the stream
                m, t, terminated = end
                expected[(e, start)] = (ret, t + 0.5, terminated, gamma ** m)
    return expected


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_transitions_match_brute_force(n: int) -> None:
    gamma, data = 0.9, stream(num_envs=6, steps=60, seed=n)
    builder = NStepBuilder(n, gamma)
    got = {}
    for step, truncated in data:
        out = builder.push(step, truncated)
        for i in range(out.shape[0]):
            key = (int(out[OBS][i, 0]), int(out[OBS][i, 1]))
            assert key not in got, f"start {key} emitted twice"
            got[key] = (float(out[REWARD][i]), float(out[NEXT_OBS][i, 1]), bool(out[TERMINATED][i]),
                        float(out[DISCOUNT][i]))
    expected = brute_force(data, n, gamma)
    assert got.keys() == expected.keys()
    for key, (ret, next_t, terminated, discount) in expected.items():
        g = got[key]
        assert g[0] == pytest.approx(ret, abs=1e-5) and g[1:3] == (next_t, terminated), key
        assert g[3] == pytest.approx(discount, rel=1e-6), key
    if n > 1:  # the stream has episode ends, so some transitions were cut short
        assert any(d[3] > gamma ** n + 1e-9 for d in got.values())


def test_every_start_is_emitted_once_its_window_closes() -> None:
    """With episodes ending (this stream always has some), every step but the last n - 1 of an unfinished
    episode starts an emitted transition.
    """
    n, data = 4, stream(num_envs=3, steps=40, seed=9)
    builder = NStepBuilder(n, 0.99)
    emitted = sum(builder.push(step, truncated).shape[0] for step, truncated in data)
    assert 3 * 40 - 3 * (n - 1) <= emitted <= 3 * 40


def test_a_dropped_row_ends_its_envs_pending_windows_at_its_last_kept_step_and_emits_no_nan() -> None:
    """A non-finite row is dropped: the steps of its env before it are finite, and each starts one row, its
    window ended as a time-out at the last kept step (they were lost: every 1-step transition lands once, the
    dynamics model reads them too).
    """
    gamma, data = 0.9, stream(num_envs=2, steps=6, seed=1)
    builder = NStepBuilder(3, gamma, keep_first_step=True)
    pushed = []
    for t, (step, truncated) in enumerate(data):
        step[TERMINATED][:] = False
        truncated = torch.zeros(2, dtype=torch.bool)
        keep = torch.tensor([t != 3, True])
        if t == 3:
            step[REWARD][0] = float("nan")
        pushed.append(builder.push(step, truncated, keep))
    out = torch.cat(pushed)
    assert bool(torch.isfinite(out[REWARD]).all())
    starts = {e: sorted(int(t) for env, t in out[OBS].tolist() if int(env) == e) for e in (0, 1)}
    # env 0: t=0 closed before the drop, t=1 and t=2 end at t=2; its later steps start anew
    assert starts == {0: [0, 1, 2], 1: [0, 1, 2, 3]}
    got = emitted(out)
    rewards = [float(data[t][0][REWARD][0]) for t in (1, 2)]
    for start, m in ((1, 2), (2, 1)):
        ret, next_t, terminated, discount = got[(0, start)]
        assert next_t == 2.5 and not terminated and discount == pytest.approx(gamma ** m)
        assert ret == pytest.approx(sum(gamma ** i * r for i, r in enumerate(rewards[start - 1:])))


def emitted(out: TensorDict) -> dict[tuple[int, int], tuple]:
    return {(int(out[OBS][i, 0]), int(out[OBS][i, 1])): (float(out[REWARD][i]), float(out[NEXT_OBS][i, 1]),
                                                         bool(out[TERMINATED][i]), float(out[DISCOUNT][i]))
            for i in range(out.shape[0])}


@pytest.mark.parametrize("n", [1, 3])
def test_flush_ends_the_pending_windows_as_time_outs_at_the_newest_step(n: int) -> None:
    """A run cut mid-episode (a resume that cannot restore the simulator) loses none of its steps: what flush
    emits is what the stream would have given had every episode timed out at its last step.
    """
    gamma, data = 0.9, stream(num_envs=5, steps=30, seed=4)
    builder, got = NStepBuilder(n, gamma), {}
    for step, truncated in data:
        got |= emitted(builder.push(step, truncated))
    pending = builder.flush()
    if n == 1:
        assert pending is None
    else:
        assert pending is not None and pending.shape[0] > 0
        assert not got.keys() & emitted(pending).keys()
        got |= emitted(pending)
    cut = [*data[:-1], (data[-1][0], torch.ones_like(data[-1][1]))]
    expected = brute_force(cut, n, gamma)
    assert got.keys() == expected.keys()
    for key, (ret, next_t, terminated, discount) in expected.items():
        assert got[key][0] == pytest.approx(ret, abs=1e-5) and got[key][1:3] == (next_t, terminated), key
        assert got[key][3] == pytest.approx(discount, rel=1e-6), key
    assert builder.flush() is None or builder.flush().shape[0] == 0  # nothing is emitted twice


def test_a_builder_restored_from_its_state_goes_on_as_the_unbroken_one() -> None:
    """The pending windows are part of a checkpoint: a builder loaded from one emits what the saved one would."""
    gamma, data = 0.9, stream(num_envs=4, steps=40, seed=7)
    unbroken, first = NStepBuilder(3, gamma), NStepBuilder(3, gamma)
    for step, truncated in data[:17]:
        unbroken.push(step, truncated), first.push(step, truncated)
    resumed = NStepBuilder(3, gamma)
    resumed.load_state_dict(first.state_dict())
    for step, truncated in data[17:]:
        a, b = unbroken.push(step, truncated), resumed.push(step, truncated)
        assert emitted(a) == emitted(b)
    fresh = NStepBuilder(3, gamma)
    fresh.load_state_dict(NStepBuilder(3, gamma).state_dict())  # saved before its first push
    assert fresh.flush() is None
