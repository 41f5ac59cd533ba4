"""frugal: the command line of the frugal allocator (the seed lab and its report)."""

__version__ = "0.1.0"
