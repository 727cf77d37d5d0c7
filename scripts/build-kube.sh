#!/bin/sh
# Builds (once) the kube-apiserver and etcd binaries the integration tests run, from the tools
# module tools/kube, into bin/kube-<version>/. A later run with an unchanged tools/kube/go.mod
# returns at once. Needs Go and the Go module proxy; the first build takes several minutes.
set -eu
cd "$(dirname "$0")/.."
exec go run ./internal/testenv/kube/cmd/build-kube
