"""The only layer that reads the world: files under an injectable root, NVML, child processes."""
