"""batchscope: one command for the whole stack (the launcher, load runs, the advisor, the
exporter, the manual's generated pages)."""
