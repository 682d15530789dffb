"""Acting on a live server: ``advise --apply`` (:mod:`autopilot.apply`), the autopilot loop
``batchscope autopilot`` (:mod:`autopilot.loop`), ``advise --verify``'s scratch copies
(:mod:`autopilot.verify`) and the autopilot's policy (:mod:`autopilot.policy`).

It stands on the advisor's search and on the one way to watch a model; the dashboard acts
only through these same functions.
"""
