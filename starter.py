"""The durafact command line: `python starter.py --help` (installed: `durafact`)."""

from durafact.cli.starter import run

if __name__ == "__main__":
    run()
