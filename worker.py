"""The durafact worker: `python worker.py` (installed: `durafact-worker`)."""

from durafact.cli.worker import run

if __name__ == "__main__":
    run()
