"""The run engine: ``runner`` (``run`` and ``prepare``: check, send, measure, store), the
traffic patterns (``scenarios``) and arrival schedules (``shapes``), the server's statistics
over the run (``serverside``), runs split over processes (``workers``) and the capacity
search (``capacity``)."""
