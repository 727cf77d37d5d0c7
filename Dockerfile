# The image of the exporter, in the layout of the Prometheus exporters: promu builds the binary
# into .build/<os>-<arch>/ (`make docker` does it for linux), and the image adds that binary,
# and nothing else, to Prometheus's busybox base (which brings CA certificates, for the GCE
# API, and time zones). It runs as nobody (65534), numerically so that Kubernetes can verify
# runAsNonRoot without a runAsUser.
ARG ARCH="amd64"
ARG OS="linux"
FROM quay.io/prometheus/busybox-${OS}-${ARCH}:latest
LABEL org.opencontainers.image.title="provider-health-exporter" \
      org.opencontainers.image.description="Prometheus exporter checking Kubernetes API servers, GCE projects and KVM hypervisors"

ARG ARCH="amd64"
ARG OS="linux"
COPY .build/${OS}-${ARCH}/provider_health_exporter /bin/provider_health_exporter

EXPOSE      9847
USER        65534:65534
ENTRYPOINT  [ "/bin/provider_health_exporter" ]
CMD         [ "--config.file=/etc/phe/config/providers.yml" ]
