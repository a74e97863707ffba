"""scripts/gpu_check.sh fits a GPU host's time: its steps' limits, probe included, add up to the 300 s
its header promises (a GPU is lent for minutes, and a rerun must fit too)."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def test_the_limits_in_the_script_add_up_to_its_header_and_to_at_most_300_s():
    text = SCRIPT.read_text()
    steps = [int(n) for n in re.findall(r'^\s*step "[^"]+" (\d+) ', text, flags=re.M)]
    probe = [int(n) for n in re.findall(r"timeout (\d+) \"\$candidate\"", text)]
    assert len(steps) == 3 and probe == [60]
    header = re.search(r"^#\s+([\d +]+) = (\d+) s", text, flags=re.M)
    parts = [int(n) for n in header.group(1).split("+")]
    assert parts == probe + steps, "the header's sum names the script's own limits, in order"
    assert sum(parts) == int(header.group(2)) <= 300
