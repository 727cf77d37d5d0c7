#!/bin/sh
# Builds (once) the kube-apiserver and etcd binaries the integration tests run, from the tools
# module tools/kube, into bin/kube-<version>/. A later run with an unchanged tools/kube/go.mod
# returns at once. With -node it also builds kube-controller-manager, kube-scheduler, kubelet and
# kube-proxy into bin/kube-node-<version>/ (make cluster). Needs Go and the Go module proxy; the
# first build takes several minutes.
set -eu
cd "$(dirname "$0")/.."
# go run compiles the small builder first (silently, from Go's build cache when warm).
echo "build-kube: checking bin/ for kube-apiserver and etcd (the first run builds them)" >&2
exec go run ./test/testenv/kube/cmd/build-kube "$@"
