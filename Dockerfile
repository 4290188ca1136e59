# The durafact worker image. Production talks to a real OpenAI-compatible endpoint,
# so the `local` extra (llama.cpp and a bundled GGUF) stays out of the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Explicit copies (plus .dockerignore) keep local state such as .venv and
# .durafact, and the tests, out of the image.
COPY pyproject.toml README.md ./
COPY durafact/ durafact/
COPY workflows/ workflows/
COPY activities/ activities/
RUN pip install --no-cache-dir .

# Least privilege: the worker needs no root, and the root-owned code above stays
# read-only to it.
RUN useradd --create-home --uid 10001 --user-group durafact
USER durafact

# The worker drains in-flight activities on SIGTERM; compose's stop_grace_period bounds it.
STOPSIGNAL SIGTERM
CMD ["durafact-worker"]
