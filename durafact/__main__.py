"""`python -m durafact`: the `durafact` command line, in this interpreter."""

from durafact._cli.starter import run

run()
