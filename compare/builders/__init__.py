"""Model builders: random instances (generators), deeper profiles (deepen) and multi-branch
models (towers)."""
