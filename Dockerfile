# The studio image: web (uvicorn) and worker (celery) run from it; see docker-compose.yml.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends chromium bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
ENV SANDBOX_PYTHON=/usr/local/bin/python3 DEBUG=false
RUN SECRET_KEY=build python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "studio.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--ws-per-message-deflate", "false", "--no-proxy-headers"]
