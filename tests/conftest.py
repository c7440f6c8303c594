import os
import sys

# Keep CPU tests single-device and quiet; set before JAX initializes.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(__file__))
