package main

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// ownClientConfig is the client configuration of the exporter's own clients (--crd.kubeconfig,
// --shard.kubeconfig): the in-cluster configuration when path is empty, else the kubeconfig at
// path, read as every file an operator names is read (a regular file, at most 1 MiB, within a
// deadline), its current context in use. The files that context names (certificate authority,
// client certificate and key, token file) are taken relative to the kubeconfig's directory, as
// client-go takes them, and checked the same way from their metadata before client-go opens
// them itself: it re-reads a rotated token file and client certificate, which an inlined copy
// would freeze.
func ownClientConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given and no in-cluster configuration: %w", err)
		}
		return cfg, nil
	}
	data, err := fileread.Read(path, fileread.CredentialLimit)
	if err != nil {
		return nil, err
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range raw.Clusters {
		c.LocationOfOrigin = path
	}
	for _, a := range raw.AuthInfos {
		a.LocationOfOrigin = path
	}
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil {
		var files []*string
		if c := raw.Clusters[ctx.Cluster]; c != nil {
			files = append(files, &c.CertificateAuthority)
		}
		if a := raw.AuthInfos[ctx.AuthInfo]; a != nil {
			files = append(files, &a.ClientCertificate, &a.ClientKey, &a.TokenFile)
		}
		for _, f := range files {
			if *f == "" {
				continue
			}
			if err := fileread.Check(*f, fileread.CredentialLimit); err != nil {
				return nil, fmt.Errorf("%s: context %q: %w", path, raw.CurrentContext, err)
			}
		}
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
