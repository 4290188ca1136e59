"""`python -m durafact`: the `durafact` command, in this interpreter."""

from durafact._main import run

run()
