"""`python -m singularity` runs the command-line interface."""

from singularity.cli.main import main

main()
