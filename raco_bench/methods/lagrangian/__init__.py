"""The Lagrangian SGDA family: RaCO-DP (Algorithm 1), non-private SGDA, DP-SGD and SGD, in one folder
(docs/methods/raco-dp.md; docs/architecture.md, "Methods").

* :mod:`.plugin`: the plugins (hyperparameters, search space, calibration, privacy events, prepare/step);
* :mod:`.step`: one step of a single run (Algorithm 1, line by line);
* :mod:`.engine`: the same step for K configurations at once (the batched engine packs use);
* :mod:`.audit`: what the white-box audit observes of a step (its audit view).
"""
