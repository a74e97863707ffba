"""The decode loop and its pieces, side by side: caches, stop checks, stop policies, samplers,
prompts, the model, and the profiler's named ranges. tokengen.decode.loop composes them."""
