"""The embedded stack's local model, stood in for by the scripted model (its default
answers), so that a test of the stack needs no model file:

    python -m tests.stand_in_model --port PORT

`tests.helpers.start_stand_in_model` starts it as `durafact up` starts the local model
server (durafact/_local/embedded.py), so its pid file names `--port` as the real one's
does, and `up`, `durafact-worker` and a worker of your own find it as they find that."""

import argparse
import threading

from durafact.testing import ScriptedModel

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    with ScriptedModel(parser.parse_args().port):
        threading.Event().wait()  # until `durafact down` or the test stops it
