package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// kubectlTimeout bounds one kubectl command: a kustomize rendering or a request to a test
// cluster, on a loaded machine.
const kubectlTimeout = 2 * time.Minute

// Kubectl runs the machine's kubectl with args, stdin (when not nil) on its input, for at most
// kubectlTimeout, and returns its combined output and how it ended. Without kubectl the test
// ends through testenv.Unavailable. ClusterFlags are the flags that point it at a cluster.
func Kubectl(tb testing.TB, stdin []byte, args ...string) (string, error) {
	tb.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(tb, "kubectl is not on PATH: install it (e.g. the kubectl package) to run this test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ClusterFlags are kubectl's flags for the cluster of kubeconfig, with a discovery cache of the
// test's own: the machine's ~/.kube/cache may hold entries for a former server that had the
// same port. Append the command's arguments to them.
func ClusterFlags(tb testing.TB, kubeconfig string) []string {
	return slices.Clip([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(tb.TempDir(), "cache")})
}

// DecodeObjects decodes a multi-document YAML (or JSON) manifest, a rendering of deploy/ or of
// the chart, into its objects; an empty document is skipped.
func DecodeObjects(tb testing.TB, manifest []byte) []*unstructured.Unstructured {
	tb.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			tb.Fatalf("decode the rendered manifests: %v\n%s", err, manifest)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}
