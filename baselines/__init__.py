"""The baselines that run beside RaCO-DP, one folder per algorithm family: DP-FERMI (:mod:`baselines.dp_fermi`), PF-LD
(:mod:`baselines.pf_ld`), DP post-processing (:mod:`baselines.dp_postprocess`) and privacy budget tailoring
(:mod:`baselines.budget_tailoring`). Non-private SGDA, DP-SGD and SGD share RaCO-DP's step and live with it
(:mod:`raco_bench.methods.lagrangian`). Every plugin is registered in :mod:`raco_bench.methods`."""
