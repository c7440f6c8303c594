"""The basics every layer may use and that know nothing of the rest: the engine's array types
and shapes (types), prefix sums and sorts (ops), the relaxed gates (relax), histograms, the
cost of an iteration (cost), random streams, and the host's errors, file writing, input
checks and suggestions."""
