"""The autotuner: search space, sampler, cost model, measurer, records, cache and the CLI.

Imports: everything above it (backends, schedule, tensorlang), optuna, scikit-learn.
"""
