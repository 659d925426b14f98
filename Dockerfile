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
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 procps ca-certificates \
 && apt-get install -y -qq --no-install-recommends libyaml-cpp0.7 libyaml-0-2 libspdlog1.10 libfmt9 libcpp-httplib0.11 libssl3 zlib1g libbrotli1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/nodeagent /src/build/nodeagent-shim /src/build/test-apiserver /usr/local/bin/
COPY deploy/examples/config.yaml /etc/nodeagent/config.yaml
COPY deploy/examples/manifests/ /etc/nodeagent/manifests/
# The read-only port must be reachable from outside the container.
EXPOSE 10255
ENTRYPOINT ["/usr/local/bin/nodeagent", "--config=/etc/nodeagent/config.yaml", "--address=0.0.0.0"]
