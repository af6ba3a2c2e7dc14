"""Cross-checking: the one registry of methods, verify's verdicts, exhaustive search, the
shrinking of counterexamples and external planners."""
