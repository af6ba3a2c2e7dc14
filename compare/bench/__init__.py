"""Benchmarks that print numbers: the DP against the original planner (dp), the MILP
backends (milp), the DP in the modes of secs. 8-9 (modes)."""
