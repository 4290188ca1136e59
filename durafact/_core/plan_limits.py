"""The limits of a PlanExecute run's plan, in the core so that the command line's
`plan --max-steps` states them without importing the workflows."""

# The longest plan a run may ask for. `max_steps` is per run (the input, `--max-steps`),
# so a long plan needs no new deployment; the bound keeps one run's history (about 4 KB
# per step) and its artifacts query (every text of the run) far below Temporal's limits.
MAX_STEPS = 100
# The plan length a run asks for when its input names none.
DEFAULT_STEPS = 3
