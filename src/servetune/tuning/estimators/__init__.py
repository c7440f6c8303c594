"""How the tuner estimates where to move: evolution strategies (es), pathwise gradients through
the relaxed simulator (pathwise, pathwise_gradient) and paired central differences
(paired_difference)."""
