"""Gradients of the tuning objective, everything the exact engine does not need: the relaxed
schedule of an iteration (relaxed_batch: token weights, admission perturbations, token debts),
the relaxed engine's progress and admission shifts (pace, shift), the swap tape of a relaxed
priority order (swap), pathwise derivatives through the relaxed simulator (pathwise), and
paired central differences for the decisions no relaxed gate carries (paired_difference). The
gates themselves are servetune/relax.py, which the exact engine calls too; the engine calls
the modules here only behind engine.relax / engine.relax_order, resolved at trace time."""
