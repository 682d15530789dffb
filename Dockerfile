# One image for the stack's Python services: the exporter, the dashboard and the load
# generator. compose.yaml and deploy/k8s/ choose the command; Triton runs in NVIDIA's image.
#   docker build -t triton-batchscope:0.1.0 .
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The dependencies first, read from pyproject.toml, so that a code change does not
# reinstall them.
COPY pyproject.toml ./
RUN python -c "import pathlib, subprocess, sys, tomllib; \
text = pathlib.Path('pyproject.toml').read_text(); \
deps = tomllib.loads(text)['project']['dependencies']; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', *deps])"

# The project as it is (.dockerignore leaves out tests, virtual environments and state),
# installed without its dependencies: whichever packages it has, one `pip install .`.
COPY . .
RUN pip install --no-deps . \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin batchscope \
    && mkdir -p /data && chown batchscope /data

# Not root. /data holds the load-run store; a named volume mounted there starts with
# this ownership.
USER 10001
# Inside a container the services listen on every interface of its own network namespace;
# what is published is compose's and Kubernetes' decision (compose: 127.0.0.1 only).
EXPOSE 9733 8501
CMD ["batchscope", "exporter", "--web.listen-address", ":9733"]
