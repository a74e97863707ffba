"""PyTorch-native autoregressive decoding, one optimization at a time, verified and measured.

Depends on torch and transformers only. By role:
- tokengen.contract: the spec, the record, names, variants, rules (torch-free)
- tokengen.models: the decoder model, built from a preset or a local checkpoint
- tokengen.decode: the decode loop and its pieces
- tokengen.engines: who generates (our loop, transformers' generate() peers, request servers)
- tokengen.measure: one trial, measured (tokengen.measure.trial.run_trial)
- tokengen.cli: `python -m tokengen`, one trial from the command line
"""
