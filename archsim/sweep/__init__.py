"""Design-space exploration: `archsim sweep SPEC` (docs/sweep.md).

spec.py reads and validates a sweep spec, commands.py runs one point through a command's own functions,
store.py keeps every point in an append-only SQLite store, runner.py schedules the missing points on local
processes or a Dask cluster, cli.py is the command.
"""
