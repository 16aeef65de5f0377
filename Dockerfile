# Build stage: the release binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY config ./config
COPY jobs ./jobs
COPY samples ./samples
RUN cargo build --release --locked --bin agentd

# Runtime stage: small, non-root, with the job and config files. TLS is rustls (no libssl);
# ca-certificates is the CA store the model-server connections verify against.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /app agentd
WORKDIR /app
COPY --from=build /src/target/release/agentd /usr/local/bin/agentd
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
