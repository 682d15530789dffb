"""The load-run store: one SQLite file of load runs, their records, and the config changes
made on live models. ``RunStore`` (``store``) opens it; ``schema`` holds its tables and
migrations, ``writes`` and ``reads`` its rows, ``changes`` the change log, ``export`` and
``prune`` the rest. It takes and returns plain values (rows and JSON); the typed runs are
the load generator's (``loadgen.results.stored``)."""
