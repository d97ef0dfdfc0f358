"""Reports from MLflow: tidy tables, Pareto frontiers, constraint satisfaction, FNR plots, wall-time tables."""
