"""A discrete-event simulation of a plan's schedule: the referee of the cost model's
secs. 8-9 (and 11)."""
