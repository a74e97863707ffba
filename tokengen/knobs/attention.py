"""The `attention` knob: which scaled-dot-product-attention kernel a step may use (torch.nn.attention).

Each value is a context factory that allows one backend only, so a step that backend cannot run fails
with torch's own reason instead of silently taking another kernel. The kernels do the same math in a
different order, so their tokens are held to the fidelity gate, not to a checksum.
"""

from __future__ import annotations

import functools

from torch.nn.attention import SDPBackend, sdpa_kernel


def _only(backend: SDPBackend):
    return functools.partial(sdpa_kernel, [backend])


MATH = _only(SDPBackend.MATH)
EFFICIENT = _only(SDPBackend.EFFICIENT_ATTENTION)
FLASH = _only(SDPBackend.FLASH_ATTENTION)
CUDNN = _only(SDPBackend.CUDNN_ATTENTION)
