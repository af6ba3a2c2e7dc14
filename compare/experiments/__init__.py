"""Experiments: campaigns of random DAGs, sweeps and their plots, the ladder, and the job
runner (local worker processes or dask) that they share."""
