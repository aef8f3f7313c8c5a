"""`python -m archsim` runs the CLI, like the `archsim` console script."""

from archsim.cli import main

main()
