package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/metadata"
)

// ApplyCRDFile applies the CustomResourceDefinitions in the YAML file at path, or in every
// .yaml file of the directory at path (deploy/crd/: ProviderHealth and ProviderHealthPart);
// see ApplyCRD.
func (e *Env) ApplyCRDFile(t testing.TB, path string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("kube: read CRD manifest: %v", err)
		}
		crds = append(crds, e.ApplyCRD(t, b)...)
	}
	return crds
}

// ApplyCRD creates (or updates) every CustomResourceDefinition in manifest (YAML or JSON, one or
// more documents) and waits until each is Established, served by discovery and listable, so
// the next request, or kubectl, can use the new resource at once. It returns the applied definitions.
func (e *Env) ApplyCRD(t testing.TB, manifest []byte) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	crds, err := e.applyCRD(ctx, manifest)
	if err != nil {
		t.Fatalf("kube: apply CRD: %v", err)
	}
	return crds
}

func (e *Env) applyCRD(ctx context.Context, manifest []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	client, err := apiextensionsclient.NewForConfig(e.AdminConfig)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	crdClient := client.ApiextensionsV1().CustomResourceDefinitions()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var applied []*apiextensionsv1.CustomResourceDefinition
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := dec.Decode(&crd); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if crd.Name == "" {
			continue // an empty document
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("manifest holds a %s, not a CustomResourceDefinition", crd.Kind)
		}
		got, err := crdClient.Create(ctx, &crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var current *apiextensionsv1.CustomResourceDefinition
			current, err = crdClient.Get(ctx, crd.Name, metav1.GetOptions{})
			if err == nil {
				crd.ResourceVersion = current.ResourceVersion
				got, err = crdClient.Update(ctx, &crd, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("apply %s: %w", crd.Name, err)
		}
		applied = append(applied, got)
	}
	if len(applied) == 0 {
		return nil, errors.New("manifest holds no CustomResourceDefinition")
	}
	for i, crd := range applied {
		established, err := e.waitEstablished(ctx, client, crd.Name)
		if err != nil {
			return nil, err
		}
		applied[i] = established
	}
	return applied, nil
}

func (e *Env) waitEstablished(ctx context.Context, client *apiextensionsclient.Clientset, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	for {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err == nil && isEstablished(crd) && served(client, crd) && e.listable(ctx, crd) {
			return crd, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("CRD %s not established and served: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listable reports whether a list of the CRD's resource succeeds: for a moment after it is
// served, the API server answers 429 while the resource's watch cache initializes.
func (e *Env) listable(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) bool {
	client, err := metadata.NewForConfig(e.AdminConfig)
	if err != nil {
		return false
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
		if _, err := client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return false
		}
	}
	return true
}

func isEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// served reports whether discovery lists the CRD's plural in every served version; a CRD is
// Established a moment before discovery shows it, and kubectl resolves names through discovery.
func served(client *apiextensionsclient.Clientset, crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		list, err := client.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
		if err != nil {
			return false
		}
		found := false
		for _, r := range list.APIResources {
			if r.Name == crd.Spec.Names.Plural {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
