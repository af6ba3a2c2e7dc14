"""Baseline planners judged under Piper's contract: PipeDream-2BW's planner (twobw) and
PipeDream's own planner (pipedream)."""
