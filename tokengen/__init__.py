"""PyTorch-native autoregressive decoding, one optimization at a time, verified and measured.

Depends on torch and transformers only. By role:
- tokengen.contract: the spec, the record, names, variants, rules (torch-free)
- tokengen.models: the decoder model, built from a preset or a local checkpoint
- tokengen.decode: the decode loop and its pieces
- tokengen.engines: who generates (our loop, transformers' generate() peers, request servers)
- tokengen.knobs: the knobs that act on the model (quant) or around the steps (attention)
- tokengen.measure: one trial, measured (tokengen.measure.trial.run_trial)
- tokengen.cli: `python -m tokengen`, one trial from the command line
"""

import logging as _logging

# transformers imports torchao (when installed) while it builds a model: its CUDA extensions fail to load on
# a CPU build and it registers enums torch already supports, each with a warning in every trial's log
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)
