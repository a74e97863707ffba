"""The `quant` knob: weight-only quantization of the model's linear layers with torchao's `quantize_`.

GPT-2's projections are transformers' `Conv1D` (y = x W + b, W stored as (in, out)), which `quantize_`
does not recognise: left as they are, only the tied head would be quantized. They become `nn.Linear`
first (W transposed: the same product), so every block's weights are quantized. The head is quantized
as a Linear of its own (untied from the embedding, which stays in the model's dtype: it is read one row
per token). int4 uses tinygemm's tile-packed layout, whose groups must divide a layer's inputs: each layer
gets the largest group of 128, 64 or 32 that does, and a layer no group divides stays unquantized.
"""

from __future__ import annotations

import logging

import torch

logging.getLogger("torchao").setLevel(logging.ERROR)  # its CUDA extensions fail to load on a CPU build, loudly


def linear_from_conv1d(module: torch.nn.Module) -> torch.nn.Module:
    """Every transformers Conv1D inside `module` replaced by the nn.Linear that computes the same."""
    from transformers.pytorch_utils import Conv1D

    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                weight = child.weight  # (in, out)
                linear = torch.nn.Linear(weight.shape[0], weight.shape[1], device=weight.device, dtype=weight.dtype)
                linear.weight = torch.nn.Parameter(weight.detach().t().contiguous(), requires_grad=False)
                linear.bias = torch.nn.Parameter(child.bias.detach(), requires_grad=False)
                setattr(parent, name, linear)
    return module


def int8(model: torch.nn.Module) -> torch.nn.Module:
    """Per-row symmetric int8 weights, activations in the model's dtype."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    quantize_(linear_from_conv1d(model), Int8WeightOnlyConfig())
    return model


def int4(model: torch.nn.Module) -> torch.nn.Module:
    """Grouped asymmetric int4 weights in tinygemm's layout (CUDA, bfloat16)."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    linear_from_conv1d(model)
    for group in (128, 64, 32):

        def fits(module, _name, group=group):
            return (
                isinstance(module, torch.nn.Linear)
                and module.in_features % group == 0
                and all(module.in_features % g for g in (128, 64, 32) if g > group)
            )

        quantize_(
            model, Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d"), filter_fn=fits
        )
    return model


INT8, INT4 = int8, int4
