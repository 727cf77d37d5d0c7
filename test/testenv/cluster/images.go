package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// No registry is reachable from the machines this runs on: both images the node runs are
// imported into containerd's k8s.io namespace from OCI image layouts.

// buildPauseLayout compiles the pause command (statically) and writes the one-layer image
// pauseImage as an OCI layout archive at out.
func buildPauseLayout(root, out string) error {
	bin := filepath.Join(filepath.Dir(out), "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./test/testenv/cluster/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the pause command: %v\n%s", err, b)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	gz := gzip.NewWriter(&layer)
	tw := tar.NewWriter(gz)
	var diff bytes.Buffer
	difftw := tar.NewWriter(&diff)
	for _, w := range []*tar.Writer{tw, difftw} {
		if err := w.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(exe)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := w.Write(exe); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	if err := gz.Close(); err != nil {
		return err
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(diff.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer.Bytes())},
	})
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	_, tag, _ := strings.Cut(pauseImage, ":")
	md["annotations"] = map[string]string{"org.opencontainers.image.ref.name": tag}
	md["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	aw := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer.Bytes()), layer.Bytes()},
	}
	for _, file := range files {
		if err := aw.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := aw.Write(file.data); err != nil {
			return err
		}
	}
	return aw.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:")
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

// tarLayout archives the OCI image layout directory dir (what make image writes) at out.
func tarLayout(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: st.Size(), ModTime: st.ModTime()}); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	return tw.Close()
}

// importImage imports the OCI archive into containerd's k8s.io namespace (the CRI's), naming
// its tagged images baseName:tag, the host's platform only, and checks that want is there.
func (c *Cluster) importImage(archive, baseName, want string) error {
	out, err := exec.Command("ctr", "--address", socketPath(c.Dir), "-n", "k8s.io", "images", "import",
		"--base-name", baseName, "--platform", "linux/"+runtime.GOARCH, archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v\n%s", archive, err, out)
	}
	list, err := exec.Command("ctr", "--address", socketPath(c.Dir), "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		return fmt.Errorf("ctr images ls: %w", err)
	}
	for _, name := range strings.Fields(string(list)) {
		if name == want {
			return nil
		}
	}
	return fmt.Errorf("imported %s, but containerd has no image %s: it has %s", archive, want, strings.Fields(string(list)))
}
