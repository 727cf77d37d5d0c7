package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The OCI image layout as the image spec defines it, read here with encoding/json alone, not
// with the library that wrote it.
type ociDescriptor struct {
	MediaType   string `json:"mediaType"`
	Digest      string `json:"digest"`
	Size        int64  `json:"size"`
	Platform    *struct{ OS, Architecture, Variant string }
	Annotations map[string]string `json:"annotations"`
}

type ociIndex struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []ociDescriptor   `json:"manifests"`
	Annotations   map[string]string `json:"annotations"`
}

type ociManifest struct {
	MediaType   string            `json:"mediaType"`
	Config      ociDescriptor     `json:"config"`
	Layers      []ociDescriptor   `json:"layers"`
	Annotations map[string]string `json:"annotations"`
}

type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
	Config       struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		ExposedPorts map[string]struct{}
		Labels       map[string]string
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// The SPDX 2.3 fields the test reads.
type spdxDoc struct {
	SPDXVersion string `json:"spdxVersion"`
	Packages    []struct {
		SPDXID          string `json:"SPDXID"`
		Name            string `json:"name"`
		VersionInfo     string `json:"versionInfo"`
		LicenseDeclared string `json:"licenseDeclared"`
		Checksums       []struct {
			Algorithm string `json:"algorithm"`
			Value     string `json:"checksumValue"`
		} `json:"checksums"`
		ExternalRefs []struct {
			Type    string `json:"referenceType"`
			Locator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	Relationships []struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	} `json:"relationships"`
	ExtractedLicenses []struct {
		LicenseID string `json:"licenseId"`
	} `json:"hasExtractedLicensingInfos"`
}

const imageLayout = ".build/image"

// blob reads a blob of the layout, checking its size and digest against the descriptor.
func blob(t *testing.T, d ociDescriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("descriptor %+v: want a sha256 digest", d)
	}
	b, err := os.ReadFile(filepath.Join(imageLayout, "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes of digest sha256:%x, the descriptor says %d bytes", d.Digest, len(b), sum, d.Size)
	}
	return b
}

func decodeBlob(t *testing.T, d ociDescriptor, wantType string, v any) {
	t.Helper()
	if d.MediaType != wantType {
		t.Fatalf("%s has media type %q, want %q", d.Digest, d.MediaType, wantType)
	}
	if err := json.Unmarshal(blob(t, d), v); err != nil {
		t.Fatalf("%s: %v", d.Digest, err)
	}
}

// extractLayer unpacks a gzip-compressed layer into root, returning the uncompressed digest
// (the config's diff_id) and the paths it holds.
func extractLayer(t *testing.T, d ociDescriptor, root string) (diffID string, names []string) {
	t.Helper()
	if d.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("layer %s has media type %q, want an OCI gzip layer", d.Digest, d.MediaType)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, d)))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("layer %s: %v", d.Digest, err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("layer %s: %s is owned by %d:%d, want root (0:0)", d.Digest, hdr.Name, hdr.Uid, hdr.Gid)
		}
		name := path.Clean(hdr.Name)
		if strings.HasPrefix(name, "../") || path.IsAbs(name) {
			t.Fatalf("layer %s: entry %q outside the root", d.Digest, hdr.Name)
		}
		names = append(names, name)
		dst := filepath.Join(root, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, os.FileMode(hdr.Mode)&os.ModePerm); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, dst); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(hdr.Mode)&os.ModePerm)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("layer %s: %s has tar type %q, want a file, directory or symbolic link", d.Digest, hdr.Name, hdr.Typeflag)
		}
	}
	// The tar reader stops at the end-of-archive marker: the diff_id covers the padding too.
	if _, err := io.Copy(h, zr); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), names
}

// imageAllPlatforms makes TestImage build and walk every platform of the Makefile's PLATFORMS
// (`make image-test`, about six times the work); without it (`make test`) the host's alone.
var imageAllPlatforms = flag.Bool("image.all-platforms", false,
	"TestImage: build and check the image and tarballs of every platform of the Makefile's PLATFORMS, not the host's alone (make image-test)")

// blackboxPlatforms are the Linux platforms blackbox_exporter's images ship, all of which Go builds.
var blackboxPlatforms = []string{"linux/386", "linux/amd64", "linux/arm/v7", "linux/arm64", "linux/ppc64le", "linux/s390x"}

// makefilePlatforms is the default of the Makefile's PLATFORMS, sorted.
func makefilePlatforms(t *testing.T) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^PLATFORMS \?= (.+)$`).FindSubmatch(must(os.ReadFile("Makefile")))
	if m == nil {
		t.Fatal("the Makefile has no line PLATFORMS ?= ...")
	}
	platforms := strings.Fields(string(m[1]))
	sort.Strings(platforms)
	return platforms
}

// TestImagePlatforms: the platforms `make image`, `make crossbuild` and `make tarballs` build by
// default (the Makefile's PLATFORMS) are the six blackbox_exporter ships, and .promu.yml's
// crossbuild lists the same, so `promu crossbuild` builds no others. It builds nothing:
// TestImage builds the host's platform under `make test`, all of them under `make image-test`.
func TestImagePlatforms(t *testing.T) {
	platforms := makefilePlatforms(t)
	if !slices.Equal(platforms, blackboxPlatforms) {
		t.Errorf("the Makefile's PLATFORMS are %v, want %v", platforms, blackboxPlatforms)
	}
	var promu struct{ Crossbuild struct{ Platforms []string } }
	if err := yaml.Unmarshal(must(os.ReadFile(".promu.yml")), &promu); err != nil {
		t.Fatal(err)
	}
	// promu names linux/arm/v7 linux/armv7.
	var promuPlatforms []string
	for _, p := range platforms {
		goos, rest, _ := strings.Cut(p, "/")
		promuPlatforms = append(promuPlatforms, goos+"/"+strings.ReplaceAll(rest, "/", ""))
	}
	sort.Strings(promuPlatforms)
	if sort.Strings(promu.Crossbuild.Platforms); !slices.Equal(promu.Crossbuild.Platforms, promuPlatforms) {
		t.Errorf(".promu.yml's crossbuild platforms are %v, the Makefile's %v: promu crossbuild would build others", promu.Crossbuild.Platforms, platforms)
	}
}

// TestImage: `make image tarballs` builds, without a container engine, the OCI image layout and
// the release tarballs: for the host's platform under `make test`, for every platform of the
// Makefile's PLATFORMS (the six Linux platforms blackbox_exporter ships: amd64, arm64, arm/v7,
// ppc64le, s390x, 386; TestImagePlatforms) with -image.all-platforms (`make image-test`). The
// test reads the layout as the OCI image spec defines it: one index tagged v<VERSION> with
// exactly the platforms built, each config's rootfs.type "layers", every blob of the
// size and digest its descriptor says; each image runs the binary of its architecture as 65534
// with the OCI labels of this version, commit and repository, on a base of CA certificates,
// time zones and a passwd, nothing else. The amd64 image's root filesystem, extracted, runs the
// exporter: --version and --config.check of the example providers file (testdata/providers.yml,
// docs/configuration.md), chrooted into it as 65534 when the test runs as root. The layout is
// pushed with crane to a registry on loopback and read back. The SBOM lists every Go module
// the binary records and the Debian packages of the base, each with the licenses its license
// data declares; the tarballs hold the same binaries
// with the systemd unit, and sha256sums.txt their checksums.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is built on linux")
	}
	testenv.SkipIfShort(t, "builds the image and tarballs with make image tarballs (promu for six platforms)")
	makePath, err := exec.LookPath("make")
	if err != nil {
		testenv.Unavailable(t, "no make on PATH: install Debian's make package")
	}
	debs := map[string]string{}
	for _, p := range []string{"ca-certificates", "tzdata"} {
		v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", p).Output()
		if err != nil || len(v) == 0 {
			testenv.Unavailable(t, "the image's base needs Debian's %s package: apt-get install ca-certificates tzdata", p)
		}
		debs[p] = string(v)
	}
	version := strings.TrimSpace(string(must(os.ReadFile("VERSION"))))
	revision, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		testenv.Unavailable(t, "git rev-parse HEAD: %v (the image's revision label comes from git)", err)
	}
	rev := strings.TrimSpace(string(revision))
	commitTime, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
	if err != nil {
		testenv.Unavailable(t, "git log -1: %v (the image's created time is the commit's)", err)
	}
	created := time.Unix(must(strconv.ParseInt(strings.TrimSpace(string(commitTime)), 10, 64)), 0).UTC().Format(time.RFC3339)
	// stamped checks the annotations that tell one build from another under the same tag:
	// the version, the commit and its time.
	stamped := func(what string, got map[string]string) {
		t.Helper()
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": rev,
			"org.opencontainers.image.created":  created,
		} {
			if got[k] != want {
				t.Errorf("%s: annotation %s=%q, want %q", what, k, got[k], want)
			}
		}
	}

	wantPlatforms := makefilePlatforms(t)
	if !*imageAllPlatforms {
		host := "linux/" + runtime.GOARCH
		if runtime.GOARCH == "arm" {
			host += "/v7"
		}
		if !slices.Contains(wantPlatforms, host) {
			testenv.Unavailable(t, "the host's platform %s is not one of the Makefile's PLATFORMS %v: run with -image.all-platforms (make image-test)", host, wantPlatforms)
		}
		wantPlatforms = []string{host}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// .build/ is this test's until it ends: the chart's test on a node builds and reads the
	// image there too.
	t.Cleanup(testenv.LockImage(t, "."))
	platformsArg := "PLATFORMS=" + strings.Join(wantPlatforms, " ")
	out, err := exec.CommandContext(ctx, makePath, "image", "tarballs", platformsArg).CombinedOutput()
	if err != nil {
		t.Fatalf("make image tarballs %s: %v\n%s", platformsArg, err, out)
	}

	var layoutFile struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(imageLayout, "oci-layout"))), &layoutFile); err != nil || layoutFile.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("oci-layout: %+v, %v; want imageLayoutVersion 1.0.0", layoutFile, err)
	}
	var top ociIndex
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(imageLayout, "index.json"))), &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v"+version {
		t.Fatalf("index.json lists %+v, want one index tagged v%s (as make docker tags it)", top.Manifests, version)
	}
	var idx ociIndex
	decodeBlob(t, top.Manifests[0], "application/vnd.oci.image.index.v1+json", &idx)
	if idx.SchemaVersion != 2 {
		t.Errorf("the index has schemaVersion %d, want 2", idx.SchemaVersion)
	}
	stamped("index.json's entry", top.Manifests[0].Annotations)
	stamped("the image index", idx.Annotations)

	source := ""
	for _, l := range strings.Split(string(must(os.ReadFile("charts/provider-health-exporter/Chart.yaml"))), "\n") {
		if v, ok := strings.CutPrefix(l, "home: "); ok {
			source = strings.TrimSpace(v)
		}
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
		"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "386": elf.EM_386}
	roots := map[string]string{}
	var platforms []string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			t.Fatalf("index entry %s has no platform", m.Digest)
		}
		platform := m.Platform.OS + "/" + m.Platform.Architecture
		if m.Platform.Variant != "" {
			platform += "/" + m.Platform.Variant
		}
		platforms = append(platforms, platform)
		var man ociManifest
		decodeBlob(t, m, "application/vnd.oci.image.manifest.v1+json", &man)
		stamped(platform+"'s manifest", man.Annotations)
		var cfg ociConfig
		decodeBlob(t, man.Config, "application/vnd.oci.image.config.v1+json", &cfg)
		if cfg.OS+"/"+cfg.Architecture+strings.TrimSuffix("/"+cfg.Variant, "/") != platform {
			t.Errorf("%s: the config is for %s/%s/%s", platform, cfg.OS, cfg.Architecture, cfg.Variant)
		}
		// The image spec: rootfs.type "layers" (containerd's import and strict registries refuse
		// any other).
		if cfg.RootFS.Type != "layers" {
			t.Errorf("%s: rootfs.type %q, want \"layers\"", platform, cfg.RootFS.Type)
		}
		if uid, _, _ := strings.Cut(cfg.Config.User, ":"); uid != "65534" {
			t.Errorf("%s: user %q, want 65534 (numeric, for runAsNonRoot)", platform, cfg.Config.User)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/bin/provider_health_exporter"}) {
			t.Errorf("%s: entrypoint %q, want the binary alone", platform, cfg.Config.Entrypoint)
		}
		if _, port, _ := strings.Cut(exporter.DefaultListenAddress, ":"); len(cfg.Config.ExposedPorts) != 1 {
			t.Errorf("%s: exposed ports %v, want %s/tcp", platform, cfg.Config.ExposedPorts, port)
		} else if _, ok := cfg.Config.ExposedPorts[port+"/tcp"]; !ok {
			t.Errorf("%s: exposed ports %v, want %s/tcp", platform, cfg.Config.ExposedPorts, port)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": rev,
			"org.opencontainers.image.source":   source,
			"org.opencontainers.image.title":    "provider-health-exporter",
		} {
			if got := cfg.Config.Labels[k]; got != want || want == "" {
				t.Errorf("%s: label %s=%q, want %q", platform, k, got, want)
			}
		}

		root := t.TempDir()
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		roots[platform] = root
		if len(man.Layers) != len(cfg.RootFS.DiffIDs) {
			t.Fatalf("%s: %d layers, %d diff_ids", platform, len(man.Layers), len(cfg.RootFS.DiffIDs))
		}
		var all []string
		for i, l := range man.Layers {
			diffID, names := extractLayer(t, l, root)
			if diffID != cfg.RootFS.DiffIDs[i] {
				t.Errorf("%s: layer %d uncompressed is %s, the config's diff_id %s", platform, i, diffID, cfg.RootFS.DiffIDs[i])
			}
			all = append(all, names...)
		}
		for _, name := range all {
			if top, _, _ := strings.Cut(name, "/"); !slices.Contains([]string{"bin", "etc", "usr", "tmp"}, top) {
				t.Errorf("%s: the image holds %s, want only bin, etc, usr and tmp", platform, name)
			}
		}

		exe := filepath.Join(root, "bin", "provider_health_exporter")
		f, err := elf.Open(exe)
		if err != nil {
			t.Fatalf("%s: the binary: %v", platform, err)
		}
		if f.Machine != machines[cfg.Architecture] {
			t.Errorf("%s: the binary is for %v", platform, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary is dynamically linked: the image has no C library", platform)
			}
		}
		f.Close()
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(must(os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")))) {
			t.Errorf("%s: /etc/ssl/certs/ca-certificates.crt holds no certificate", platform)
		}
		if _, err := time.LoadLocationFromTZData("Europe/Berlin", must(os.ReadFile(filepath.Join(root, "usr/share/zoneinfo/Europe/Berlin")))); err != nil {
			t.Errorf("%s: zoneinfo: %v", platform, err)
		}
		if !strings.Contains(string(must(os.ReadFile(filepath.Join(root, "etc/passwd")))), ":65534:65534:") {
			t.Errorf("%s: /etc/passwd does not name 65534", platform)
		}

		t.Run("sbom "+platform, func(t *testing.T) {
			checkSBOM(t, filepath.Join(".build/sbom", fmt.Sprintf("provider_health_exporter-%s.%s-%s%s.spdx.json", version, cfg.OS, cfg.Architecture, cfg.Variant)), m.Digest, exe, version, debs)
		})
		if cfg.Architecture == runtime.GOARCH && cfg.Variant == "" {
			t.Run("run "+platform, func(t *testing.T) {
				runImage(t, root, cfg.Config.Entrypoint, cfg.Config.Cmd, version, rev)
			})
		}
	}
	sort.Strings(platforms)
	if !slices.Equal(platforms, wantPlatforms) {
		t.Errorf("the index holds %v, want %v", platforms, wantPlatforms)
	}

	t.Run("push", func(t *testing.T) {
		pushToRegistry(t, top.Manifests[0], idx, version)
	})

	t.Run("tarballs", func(t *testing.T) {
		sums := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(must(os.ReadFile(".tarballs/sha256sums.txt"))))
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok {
				t.Fatalf("sha256sums.txt: line %q, want sha256sum's format", sc.Text())
			}
			sums[name] = sum
		}
		for _, platform := range platforms {
			arch := strings.ReplaceAll(strings.TrimPrefix(platform, "linux/"), "/", "")
			dir := fmt.Sprintf("provider-health-exporter-%s.linux-%s", version, arch)
			raw := must(os.ReadFile(filepath.Join(".tarballs", dir+".tar.gz")))
			if sum := sha256.Sum256(raw); sums[dir+".tar.gz"] != hex.EncodeToString(sum[:]) {
				t.Errorf("sha256sums.txt says %q for %s.tar.gz, its sha256 is %x", sums[dir+".tar.gz"], dir, sum)
			}
			delete(sums, dir+".tar.gz")
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(zr)
			var files []string
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if hdr.Typeflag != tar.TypeReg {
					continue
				}
				files = append(files, hdr.Name)
				if hdr.Name == dir+"/provider_health_exporter" {
					b, _ := io.ReadAll(tr)
					if !bytes.Equal(b, must(os.ReadFile(filepath.Join(roots[platform], "bin/provider_health_exporter")))) {
						t.Errorf("%s.tar.gz: the binary is not the image's", dir)
					}
				}
			}
			sort.Strings(files)
			want := []string{dir + "/CHANGELOG.md", dir + "/LICENSE", dir + "/README.md", dir + "/provider-health-exporter.service", dir + "/provider_health_exporter"}
			if !slices.Equal(files, want) {
				t.Errorf("%s.tar.gz holds %v, want %v", dir, files, want)
			}
		}
		if len(sums) != 0 {
			t.Errorf("sha256sums.txt lists other files: %v", sums)
		}
	})
}

// pushToRegistry pushes the layout as docs/deploy.md does, with crane from the tools module, to
// go-containerregistry's registry on loopback, and reads back the index and each platform's
// config by tag: what a cluster pulls is what the layout holds.
func pushToRegistry(t *testing.T, index ociDescriptor, idx ociIndex, version string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "no go on PATH, for go tool crane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The binary itself (go tool -n builds it and prints its path), so that the registry is
	// the process the test stops, not a go command's child.
	out, err := exec.CommandContext(ctx, goBin, "tool", "-modfile=tools/go.mod", "-n", "crane").Output()
	if err != nil {
		t.Fatalf("go tool -n crane: %v", err)
	}
	craneBin := strings.TrimSpace(string(out))
	crane := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, craneBin, args...)
	}
	addr := testutil.MustFreeLoopbackAddr(t)
	serve := crane(ctx, "registry", "serve", "--address", addr)
	var serveLog bytes.Buffer
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	serve.WaitDelay = 5 * time.Second
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Kill()
		serve.Wait()
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crane registry serve --address %s does not listen:\n%s", addr, serveLog.String())
		}
	}
	ref := addr + "/provider-health-exporter:v" + version
	if out, err := crane(ctx, "push", "--insecure", imageLayout, ref).CombinedOutput(); err != nil {
		t.Fatalf("crane push %s %s: %v\n%s", imageLayout, ref, err, out)
	}
	manifest, err := crane(ctx, "manifest", "--insecure", ref).Output()
	if err != nil {
		t.Fatalf("crane manifest %s: %v", ref, err)
	}
	if !bytes.Equal(manifest, blob(t, index)) {
		t.Errorf("the registry serves %s as\n%s\nwant the layout's index", ref, manifest)
	}
	for _, m := range idx.Manifests {
		platform := m.Platform.OS + "/" + m.Platform.Architecture
		if m.Platform.Variant != "" {
			platform += "/" + m.Platform.Variant
		}
		cfg, err := crane(ctx, "config", "--insecure", "--platform", platform, ref).Output()
		if err != nil {
			t.Fatalf("crane config --platform %s %s: %v", platform, ref, err)
		}
		var got ociConfig
		if err := json.Unmarshal(cfg, &got); err != nil || got.Architecture != m.Platform.Architecture {
			t.Errorf("crane config --platform %s: architecture %q (%v)", platform, got.Architecture, err)
		}
	}
}

// runImage runs the image's entrypoint from its extracted root filesystem: as root, chrooted
// into it as 65534, as a container runtime would; otherwise the binary in place.
func runImage(t *testing.T, root string, entrypoint, cmd []string, version, revision string) {
	configDir := filepath.Join(root, "etc/phe/config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(configDir, "providers.yml"), must(os.ReadFile("testdata/providers.yml")), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var c *exec.Cmd
		if os.Geteuid() == 0 {
			c = exec.Command(entrypoint[0], args...)
			c.Dir = "/"
			c.Env = []string{"PATH=/bin"}
			c.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		} else {
			for i, a := range args {
				if v, ok := strings.CutPrefix(a, "--config.file=/"); ok {
					args[i] = "--config.file=" + filepath.Join(root, v)
				}
			}
			c = exec.Command(filepath.Join(root, entrypoint[0]), args...)
		}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", entrypoint[0], strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("--version"); !strings.Contains(out, "version "+version) || !strings.Contains(out, "revision: "+revision) {
		t.Errorf("--version does not say version %s, revision %s:\n%s", version, revision, out)
	}
	// The image's own command (its config file), checked.
	out := run(append(slices.Clone(cmd), "--config.check")...)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != "ok" {
		t.Errorf("--config.check of the example: want ok\n%s", out)
	}
}

func checkSBOM(t *testing.T, file, imageDigest, exe, version string, debs map[string]string) {
	var doc spdxDoc
	if err := json.Unmarshal(must(os.ReadFile(file)), &doc); err != nil {
		t.Fatalf("the SBOM %s: %v", file, err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q, want SPDX-2.3", doc.SPDXVersion)
	}
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	purls := map[string]bool{}
	checksums := map[string]string{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		for _, r := range p.ExternalRefs {
			if r.Type == "purl" {
				purls[r.Locator] = true
			}
		}
		for _, c := range p.Checksums {
			if c.Algorithm == "SHA256" {
				checksums[p.Name] = c.Value
			}
		}
	}
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			t.Errorf("relationship %s %s %s names a package the SBOM does not hold", r.Element, r.Type, r.Related)
		}
	}
	if want := strings.TrimPrefix(imageDigest, "sha256:"); checksums["provider-health-exporter"] != want {
		t.Errorf("the image package's SHA256 is %q, the image's digest %s", checksums["provider-health-exporter"], imageDigest)
	}
	info, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(must(os.ReadFile(exe)))
	if checksums[info.Main.Path] != hex.EncodeToString(sum[:]) {
		t.Errorf("the exporter package's SHA256 is %q, the image's binary has %x", checksums[info.Main.Path], sum)
	}
	want := []string{
		fmt.Sprintf("pkg:golang/%s@v%s", info.Main.Path, version),
		"pkg:golang/stdlib@" + strings.TrimPrefix(info.GoVersion, "go"),
	}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		want = append(want, fmt.Sprintf("pkg:golang/%s@%s", m.Path, m.Version))
	}
	for p, v := range debs {
		want = append(want, fmt.Sprintf("pkg:deb/debian/%s@%s?arch=all", p, v))
	}
	if len(info.Deps) < 20 {
		t.Errorf("the binary records %d modules: not the exporter's build information", len(info.Deps))
	}
	for _, w := range want {
		if !purls[w] {
			t.Errorf("the SBOM lacks %s", w)
		}
	}
	// Licenses, from each package's license data: every Go module's LICENSE file in the module
	// cache and Debian's copyright files; every LicenseRef is defined.
	refs := map[string]bool{}
	for _, e := range doc.ExtractedLicenses {
		refs[e.LicenseID] = true
	}
	var unknown []string
	for _, p := range doc.Packages {
		if p.SPDXID == "SPDXRef-Image" {
			continue
		}
		if p.LicenseDeclared == "" || p.LicenseDeclared == "NOASSERTION" {
			unknown = append(unknown, p.Name)
		}
		for _, id := range strings.Split(p.LicenseDeclared, " AND ") {
			if strings.HasPrefix(id, "LicenseRef-") && !refs[id] {
				t.Errorf("package %s declares %s, which hasExtractedLicensingInfos does not define", p.Name, id)
			}
		}
	}
	if len(unknown) > 0 {
		t.Errorf("the SBOM declares no license for %v", unknown)
	}
	for _, c := range []struct{ name, want string }{
		{"golang.org/x/crypto", "BSD-3-Clause"}, {"github.com/prometheus/client_golang", "Apache-2.0"},
		{"ca-certificates", "MPL-2.0"}, {"tzdata", "LicenseRef-public-domain"},
	} {
		for _, p := range doc.Packages {
			if p.Name == c.name && !strings.Contains(p.LicenseDeclared, c.want) {
				t.Errorf("package %s declares %q, want %s in it", p.Name, p.LicenseDeclared, c.want)
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
