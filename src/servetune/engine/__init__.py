"""Engine mechanisms, one module each; every function is pure in the scenario's state."""
