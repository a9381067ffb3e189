# The image deploy/kubernetes/ names: the flux CLI (server, gateway, worker) and nothing else.
# Multi-stage: the build stage makes a virtual environment, the runtime stage copies it onto a
# slim base and runs as an unprivileged user. Base images are pinned to an exact release; pin
# them by digest too where your registry policy asks (`docker buildx imagetools inspect`).
#
#   docker build -t ghcr.io/flux-dispatch/flux:0.1.0 .

ARG PYTHON_IMAGE=python:3.12.8-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/flux
WORKDIR /src
COPY pyproject.toml README.md ./
COPY flux ./flux
COPY gateway ./gateway
RUN /opt/flux/bin/pip install --no-compile . \
    && /opt/flux/bin/python -m compileall -q /opt/flux/lib

FROM ${PYTHON_IMAGE} AS runtime
# The uid the manifests' securityContext names (runAsUser: 10001).
RUN groupadd --system --gid 10001 flux \
    && useradd --system --uid 10001 --gid flux --home-dir /var/lib/flux --create-home --shell /usr/sbin/nologin flux
COPY --from=build /opt/flux /opt/flux
ENV PATH=/opt/flux/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /var/lib/flux
# gRPC, HTTP gateway, KEDA external scaler (flux start server --keda-port).
EXPOSE 50051 8080 9090
ENTRYPOINT ["flux"]
CMD ["start", "server", "--host=0.0.0.0"]
