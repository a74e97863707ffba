from __future__ import annotations

import pytest
import torch

from tokengen.spec import SpecError
from tokengen.stopping import parse_stop, target_lengths


def test_distributions_are_seeded_and_clipped():
    a = target_lengths("uniform:3-40", 64, 20, seed=1)
    assert torch.equal(a, target_lengths("uniform:3-40", 64, 20, seed=1))
    assert not torch.equal(a, target_lengths("uniform:3-40", 64, 20, seed=2))
    assert int(a.min()) >= 3 and int(a.max()) == 20  # clipped to max_seqlen
    assert target_lengths("fixed:7", 4, 20, seed=0).tolist() == [7, 7, 7, 7]
    skewed = target_lengths("lognormal:10,0.8", 2000, 1000, seed=0).double()
    assert 8 <= skewed.median() <= 12 and skewed.mean() > skewed.median()  # right-skewed
    assert target_lengths("never", 4, 20, 0) is None and target_lengths("model", 4, 20, 0) is None


@pytest.mark.parametrize("bad", ["fixed:0", "fixed:x", "uniform:5-2", "uniform:0-3", "lognormal:0,1", "lognormal:5", "eos"])
def test_malformed_distributions_name_the_forms(bad):
    with pytest.raises(SpecError, match="stop="):
        parse_stop(bad)
