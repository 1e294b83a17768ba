# One image for every Shuttle process; the Deployment's args pick the module
# (python -m services.events | services.tools | services.planner | services.executor | gateway).

FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/shuttle
COPY pyproject.toml README.md ./
COPY proto proto
COPY shuttle shuttle
COPY services services
COPY gateway gateway
COPY cli cli
# Stubs are generated here, as `make proto` does, then installed with the package.
RUN /opt/shuttle/bin/pip install --no-cache-dir "grpcio-tools>=1.85,<2" \
 && /opt/shuttle/bin/python -m grpc_tools.protoc -I proto --python_out=. --grpc_python_out=. \
      proto/shuttle/v1/*.proto \
 && touch shuttle/v1/__init__.py \
 && /opt/shuttle/bin/pip install --no-cache-dir . \
 && /opt/shuttle/bin/pip uninstall -y grpcio-tools

FROM python:3.11-slim
# bubblewrap: python_exec runs each snippet in a container of its own (docs/tools.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 shuttle && useradd --uid 10001 --gid 10001 --no-create-home shuttle
COPY --from=build /opt/shuttle /opt/shuttle
ENV PATH=/opt/shuttle/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SHUTTLE_DATA_DIR=/tmp/shuttle
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080 50051 50052 50053 50054 9464
CMD ["python", "-m", "gateway"]
