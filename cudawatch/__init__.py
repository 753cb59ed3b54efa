"""cudawatch: continuous CUDA performance monitoring for production GPU fleets."""

__version__ = "0.1.0"
