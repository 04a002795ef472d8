"""Resource profiles, cgroups, thread knobs and the 1 Hz CPU/RSS sampler."""
