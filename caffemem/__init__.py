"""caffemem: static GPU-memory profiler and optimizer for Caffe networks."""

__version__ = "0.1.0"
