"""Gradients of the tuning objective: the relaxed engine's progress and admission shifts (pace,
shift), pathwise derivatives through the relaxed simulator (pathwise), and paired central
differences for the decisions no relaxed gate carries (paired_difference). The gates themselves
are servetune/relax.py, the only part of this the exact engine calls; the swap tape of a relaxed
order is engine/swap.py, written by the scheduler."""
