"""On-demand load runs against Triton, with every request accounted for."""
