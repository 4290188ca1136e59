# The worker image of the app at the repository's root: durafact, installed from this
# checkout as the one package `pip install` puts on sys.path, and the app built on it
# (workflows/, activities/, worker.py, starter.py), whose worker runs its own recipes
# beside the ready ones. An app of your own copies its files in their place.
# Production talks to a real OpenAI-compatible endpoint, so the `local` extra (the dev
# server, llama.cpp and a bundled GGUF) stays out of the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Explicit copies (plus .dockerignore) keep local state such as .venv and
# .durafact, and the tests, out of the image. The library first: an edit to the app
# then rebuilds only the layer below.
COPY pyproject.toml README.md ./
COPY durafact/ durafact/
RUN pip install --no-cache-dir .
COPY workflows/ workflows/
COPY activities/ activities/
COPY worker.py starter.py ./

# Least privilege: the worker needs no root, and the root-owned code above stays
# read-only to it.
RUN useradd --create-home --uid 10001 --user-group durafact
USER durafact

# The worker drains in-flight activities on SIGTERM; compose's stop_grace_period bounds it.
STOPSIGNAL SIGTERM
# The app's worker, from /app: its workflows and activities are found there.
CMD ["python", "worker.py"]
