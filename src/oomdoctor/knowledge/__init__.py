"""Tables of knowledge (CUDA/driver minima, kernel floors, arch lists, Xid codes, GPU sizes), as data."""
