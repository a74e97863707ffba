from __future__ import annotations

import pytest
import torch

from tokengen.contract.forms import parse_stop
from tokengen.contract.spec import SpecError
from tokengen.decode.stopping import StopPolicy, target_lengths


def test_distributions_are_seeded_and_clipped():
    a = target_lengths("uniform:3-40", 64, 20, seed=1)
    assert torch.equal(a, target_lengths("uniform:3-40", 64, 20, seed=1))
    assert not torch.equal(a, target_lengths("uniform:3-40", 64, 20, seed=2))
    assert int(a.min()) >= 3 and int(a.max()) == 20  # clipped to max_seqlen
    assert target_lengths("fixed:7", 4, 20, seed=0).tolist() == [7, 7, 7, 7]
    skewed = target_lengths("lognormal:10,0.8", 2000, 1000, seed=0).double()
    assert 8 <= skewed.median() <= 12 and skewed.mean() > skewed.median()  # right-skewed
    assert target_lengths("never", 4, 20, 0) is None and target_lengths("model", 4, 20, 0) is None


@pytest.mark.parametrize(
    "bad", ["fixed:0", "fixed:x", "uniform:5-2", "uniform:0-3", "lognormal:0,1", "lognormal:5", "eos"]
)
def test_malformed_distributions_name_the_forms(bad):
    with pytest.raises(SpecError, match="stop="):
        parse_stop(bad)


def test_model_stop_ends_each_row_at_its_own_eos_from_a_list():
    """Llama-3 checkpoints list several EOS ids: any of them ends its row alone; eos[0] pads."""
    policy = StopPolicy.build("model", [7, 8, 9], batch_size=3, max_seqlen=4, seed=0, device="cpu")
    finished = torch.zeros(3, dtype=torch.bool)
    said = torch.tensor([[8, 1, 1, 1], [2, 9, 2, 2], [3, 3, 3, 7]])  # (B, steps) what the model says
    kept = torch.stack([policy.apply(said[:, i].clone(), finished, i) for i in range(4)], dim=1)
    assert kept.tolist() == [[8, 7, 7, 7], [2, 9, 7, 7], [3, 3, 3, 7]]
    assert finished.tolist() == [True, True, True]


def test_forced_lengths_write_eos_at_the_target_step():
    policy = StopPolicy.build("uniform:1-3", [5], batch_size=64, max_seqlen=4, seed=0, device="cpu")
    finished = torch.zeros(64, dtype=torch.bool)
    kept = torch.stack([policy.apply(torch.zeros(64, dtype=torch.long), finished, i) for i in range(4)], dim=1)
    for row, target in zip(kept.tolist(), policy.targets.tolist()):
        assert row == [0] * (target - 1) + [5] * (5 - target)  # the target-th token is EOS, then padding
