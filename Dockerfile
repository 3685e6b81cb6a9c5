# syntax=docker/dockerfile:1
# The operator as a static (musl) binary in a distroless image that runs as non-root 65532.
#   docker build -t cloneset-operator:0.1.0 .

FROM rust:1.95-alpine AS build
# ring (rustls) compiles C and assembly: it needs the musl headers. On Alpine the default target is
# *-unknown-linux-musl and links statically.
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p cloneset-operator --bin cloneset-operator \
 && cp target/release/cloneset-operator /cloneset-operator

FROM gcr.io/distroless/static:nonroot
COPY --from=build /cloneset-operator /cloneset-operator
USER 65532:65532
ENTRYPOINT ["/cloneset-operator"]
