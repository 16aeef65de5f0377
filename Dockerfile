# Build stage: the release binary of the `agentd` package.
#
# The workspace's root manifest names every crate under `crates/` and `benches/agentd-bench` as
# members, so cargo cannot load the workspace without their manifests and sources: they are
# copied (the image builds only `-p agentd` and the crates it uses; the benchmark code is not
# compiled). The crates read `migrations/`, `config/`, `jobs/` and `samples/` at build time.
#
# Checked without a Docker daemon: `scripts/docker-build-replay.sh` reads the COPY lines and the
# `cargo build` line of this stage, copies exactly those paths into an empty folder and runs that
# command there (CI runs it through `scripts/test`). A path this stage forgets fails there.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY migrations ./migrations
COPY config ./config
COPY jobs ./jobs
COPY samples ./samples
COPY benches/agentd-bench ./benches/agentd-bench
RUN cargo build --release --locked -p agentd --bin agentd

# Runtime stage: small, non-root, with the job and config files. TLS is rustls (no libssl);
# ca-certificates is the CA store the model-server connections verify against.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /app agentd
WORKDIR /app
COPY --from=build /src/target/release/agentd /usr/local/bin/agentd
# config/default.toml documents every key (the binary has it built in; mount a file over it and
# pass `--config /app/config/FILE` or set AGENTD_CONFIG). jobs/ are the job files the worker reads.
COPY config ./config
COPY jobs ./jobs
USER agentd
ENV AGENTD_HTTP__ADDR=0.0.0.0:9187 \
    AGENTD_WORKER__JOBS_DIR=/app/jobs
EXPOSE 9187
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:9187/healthz || exit 1
ENTRYPOINT ["agentd"]
CMD ["worker"]
