"""The durafact worker: `python worker.py` (installed: `durafact-worker`)."""

from cli.worker import run

if __name__ == "__main__":
    run()
