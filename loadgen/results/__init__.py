"""What a run is and what it produces: its parameters (``params``), the per-request recorder
(``recorder``) and its latency histograms (``histogram``), the typed summaries
(``summary``), Triton's traces of the run (``tracing``) and a run just made (``result``)."""
