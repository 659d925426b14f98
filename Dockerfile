# nodeagent in a container image: a Debian 12 build stage (same dependency script and build as
# ./test/run.sh) and a slim runtime stage with the three binaries and the example setup.
# docker build -t nodeagent . && docker run --rm -p 10255:10255 nodeagent
FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN ./deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN rm -rf build \
 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build --target nodeagent nodeagent-shim test-apiserver

FROM debian:12
# python3: the example web pod; procps: ps/pgrep for debugging containers.
# tini: PID 1 reaps the orphans a host-process container leaves (the agent is not PID 1).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends tini python3 procps ca-certificates \
 && apt-get install -y -qq --no-install-recommends libyaml-cpp0.7 libyaml-0-2 libspdlog1.10 libfmt9 libcpp-httplib0.11 libssl3 zlib1g libbrotli1 libjemalloc2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/nodeagent /src/build/nodeagent-shim /src/build/test-apiserver /usr/local/bin/
COPY deploy/examples/config.yaml /etc/nodeagent/config.yaml
COPY deploy/examples/manifests/ /etc/nodeagent/manifests/
# The read-only port must be reachable from outside the container.
EXPOSE 10255
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:10248/healthz', timeout=4)"]
# `docker stop` sends SIGTERM to tini, which passes it on; the agent exits leaving its containers
# running (as on a host, for the next agent to adopt), and they end with the container. See
# README, "Container image".
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/nodeagent", "--config=/etc/nodeagent/config.yaml", "--address=0.0.0.0"]
