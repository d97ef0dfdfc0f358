"""A toy method plugin, as docs/architecture.md's "Adding a method" describes: one folder (this one) and one registry
line. It is noisy-gradient DP-SGD on logistic regression, written from scratch: a plugin (:mod:`.plugin`), a batched
engine that its single-run step also uses (:mod:`.engine`), and an audit view (:mod:`.audit`). tests/test_toy_plugin.py
registers it and checks that single runs, packs, accounted tuning and the white-box audit all take it without any
change to the suite's core."""
