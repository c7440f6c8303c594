"""The device side of gradients: the relaxed schedule of an iteration (batch: token weights,
admission perturbations, token debts), the relaxed engine's progress and admission shifts
(pace, shift) and the swap tape of a relaxed priority order (swap). The gates themselves are
core/relax.py, which the exact engine calls too; the engine calls the modules here only behind
engine.relax / engine.relax_order, resolved at trace time. The estimators that use them are
tuning/estimators/."""
