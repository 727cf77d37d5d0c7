//go:build depsanchor

// Package depsanchor keeps the modules the packages under construction need in go.mod
// while they are written. It is never compiled (see the build tag).
package depsanchor

import (
	_ "cloud.google.com/go/compute/apiv1"
	_ "cloud.google.com/go/compute/apiv1/computepb"
	_ "github.com/alecthomas/kingpin/v2"
	_ "github.com/digitalocean/go-libvirt"
	_ "github.com/digitalocean/go-libvirt/socket/dialers"
	_ "github.com/googleapis/gax-go/v2/apierror"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors/version"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/promslog"
	_ "github.com/prometheus/common/promslog/flag"
	_ "github.com/prometheus/common/version"
	_ "github.com/prometheus/exporter-toolkit/web"
	_ "github.com/prometheus/exporter-toolkit/web/kingpinflag"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/crypto/ssh"
	_ "golang.org/x/crypto/ssh/knownhosts"
	_ "golang.org/x/oauth2/jwt"
	_ "google.golang.org/api/googleapi"
	_ "google.golang.org/api/iterator"
	_ "google.golang.org/api/option"
	_ "google.golang.org/protobuf/proto"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/rest"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/tools/record"
)
