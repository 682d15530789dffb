"""Reports and comparisons of runs: the tables (``report``), A/B ratios (``compare``),
HdrHistogram percentile output (``hgrm``) and runs made side by side merged into one
(``merge``)."""
