package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// ChartDir is the Helm chart, relative to the repository's root.
const ChartDir = "charts/provider-health-exporter"

// ChartImage is the image reference the chart runs with no image values: its values'
// image.registry/image.repository and "v" followed by its appVersion. The cluster imports the
// image under that name, so that helm install needs no image values.
func ChartImage(root string) (string, error) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Registry, Repository, Tag string
		} `json:"image"`
	}
	for file, v := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(root, ChartDir, file))
		if err != nil {
			return "", err
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
	}
	if chart.AppVersion == "" || values.Image.Repository == "" {
		return "", fmt.Errorf("%s: no appVersion or image.repository", ChartDir)
	}
	tag := values.Image.Tag
	if tag == "" {
		tag = "v" + chart.AppVersion
	}
	ref := values.Image.Repository + ":" + tag
	if values.Image.Registry != "" {
		ref = strings.TrimSuffix(values.Image.Registry, "/") + "/" + ref
	}
	return ref, nil
}
