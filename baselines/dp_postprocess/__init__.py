"""DP post-processing of a base classifier (docs/methods/dp-postprocess.md): :mod:`.plugin`."""
