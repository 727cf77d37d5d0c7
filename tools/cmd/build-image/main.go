// Command build-image assembles the exporter's multi-platform OCI image without a container
// engine, with go-containerregistry: for every platform an image of two layers on an empty base,
// the base (CA certificates and time zone data from the build host's Debian packages
// ca-certificates and tzdata, and a passwd and group naming nobody) and the exporter's binary
// as promu built it into <binaries>/<os>-<arch>/, run as 65534 with the binary as entrypoint;
// the images in one index, written as an OCI image layout. Beside the layout it writes an
// SPDX 2.3 SBOM of every platform's image: the Debian packages of the base, and the exporter
// with the Go modules and Go version its build information records (debug/buildinfo, what
// `go version -m` prints), each with the licenses its license files declare: a Go module's
// LICENSE (or COPYING) files in the module cache, classified by github.com/google/licensecheck,
// and a Debian package's License fields of its machine-readable copyright file.
//
// Every time stamp (file times, the image's created) is SOURCE_DATE_EPOCH, so the same commit
// and the same host packages give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	binaryName = "provider_health_exporter"
	binaryPath = "/bin/" + binaryName
	// The user and group nobody/nogroup, numerically, so that Kubernetes can check
	// runAsNonRoot without a runAsUser.
	user = "65534:65534"
)

// The base's files, and the Debian package each comes from.
var baseFiles = []struct{ host, pkg string }{
	{"/etc/ssl/certs/ca-certificates.crt", "ca-certificates"},
	{"/usr/share/doc/ca-certificates/copyright", "ca-certificates"},
	{"/usr/share/zoneinfo", "tzdata"},
	{"/usr/share/doc/tzdata/copyright", "tzdata"},
}

type options struct {
	binaries, out, sbomDir string
	platforms              []v1.Platform
	version, revision      string
	source                 string
	created                time.Time
}

func main() {
	var o options
	var platforms, epoch string
	flag.StringVar(&o.binaries, "binaries", ".build", "the directory holding promu's <os>-<arch>/"+binaryName)
	flag.StringVar(&o.out, "out", ".build/image", "the OCI image layout to write (replaced)")
	flag.StringVar(&o.sbomDir, "sbom", ".build/sbom", "the directory for the SPDX SBOMs, one per platform")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant] (linux/arm/v7)")
	flag.StringVar(&o.version, "version", "", "the exporter's version (VERSION)")
	flag.StringVar(&o.revision, "revision", "", "the source's commit")
	flag.StringVar(&o.source, "source", "", "the source repository's URL")
	flag.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the time of every time stamp, in seconds since 1970")
	flag.Parse()
	if o.version == "" || o.revision == "" || o.source == "" {
		fatalf("-version, -revision and -source are required")
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		fatalf("-source-date-epoch %q: %v", epoch, err)
	}
	o.created = time.Unix(secs, 0).UTC()
	for _, p := range strings.Split(platforms, ",") {
		parts := strings.Split(p, "/")
		if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
			fatalf("platform %q: want os/arch or os/arch/variant", p)
		}
		pl := v1.Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) == 3 {
			pl.Variant = parts[2]
		}
		o.platforms = append(o.platforms, pl)
	}
	if err := build(o); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "build-image: "+format+"\n", args...)
	os.Exit(1)
}

func build(o options) error {
	debs := map[string]string{}
	for _, f := range baseFiles {
		if _, err := os.Stat(f.host); err != nil {
			return fmt.Errorf("the base needs %s from Debian's %s package (apt-get install ca-certificates tzdata): %w", f.host, f.pkg, err)
		}
		if _, ok := debs[f.pkg]; !ok {
			v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", f.pkg).Output()
			if err != nil {
				return fmt.Errorf("dpkg-query %s: %w", f.pkg, err)
			}
			debs[f.pkg] = string(v)
		}
	}
	base, err := baseLayer(o.created)
	if err != nil {
		return err
	}

	// The index, each platform's manifest and index.json's entry carry the version and the
	// revision the image was built from, and when: a registry, crane or skopeo shows them
	// without pulling a config, and two builds under one tag are told apart by them.
	stamp := stampAnnotations(o)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	sboms := map[string][]byte{}
	licenses := newLicenseFinder()
	for _, p := range o.platforms {
		bin := filepath.Join(o.binaries, platformDir(p), binaryName)
		img, err := platformImage(o, p, base, bin)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		img = mutate.Annotations(img, stamp).(v1.Image)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		doc, err := spdx(o, p, digest, bin, debs, licenses)
		if err != nil {
			return fmt.Errorf("%s/%s: SBOM: %w", p.OS, p.Architecture, err)
		}
		sboms[fmt.Sprintf("%s-%s.%s.spdx.json", binaryName, o.version, platformDir(p))] = doc
	}

	idx = mutate.Annotations(idx, stamp).(v1.ImageIndex)

	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	lp, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return err
	}
	entry := map[string]string{"org.opencontainers.image.ref.name": tag(o.version)}
	maps.Copy(entry, stamp)
	if err := lp.AppendIndex(idx, layout.WithAnnotations(entry)); err != nil {
		return err
	}
	// Blobs are written through temporary files (0600): readable by whoever pushes them.
	if err := filepath.WalkDir(o.out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chmod(p, 0o644)
	}); err != nil {
		return err
	}
	if err := os.MkdirAll(o.sbomDir, 0o755); err != nil {
		return err
	}
	for name, doc := range sboms {
		if err := os.WriteFile(filepath.Join(o.sbomDir, name), doc, 0o644); err != nil {
			return err
		}
	}
	digest, _ := idx.Digest()
	fmt.Printf("build-image: %s (%s), index %s; SBOMs in %s\n", o.out, o.version, digest, o.sbomDir)
	return nil
}

// stampAnnotations are the OCI annotations that say which build an image is: its version,
// the commit it was built from and when (SOURCE_DATE_EPOCH, the commit's time).
func stampAnnotations(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  o.created.Format(time.RFC3339),
		"org.opencontainers.image.source":   o.source,
	}
}

// platformDir is a platform as promu crossbuild names its directories and tarballs:
// linux-amd64, linux-armv7.
func platformDir(p v1.Platform) string { return p.OS + "-" + p.Architecture + p.Variant }

// tag is the image's tag for a version: v-prefixed, as `make docker` tags it and the Helm
// chart's image.tag defaults to.
func tag(version string) string { return "v" + version }

func platformImage(o options, p v1.Platform, base v1.Layer, bin string) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("the binary (make crossbuild builds it): %w", err)
	}
	var files tarFiles
	files.dir("bin", o.created)
	files.file("bin/"+binaryName, 0o755, exe, o.created)
	binLayer, err := files.layer()
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: o.created},
		// The image spec requires "layers"; mutate.Append fills in the diff_ids only.
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:         user,
			Entrypoint:   []string{binaryPath},
			Cmd:          []string{"--config.file=/etc/phe/config/providers.yml"},
			ExposedPorts: map[string]struct{}{"9847/tcp": {}},
			Env:          []string{"PATH=/bin"},
			WorkingDir:   "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":       "provider-health-exporter",
				"org.opencontainers.image.description": "Prometheus exporter checking Kubernetes API servers, GCE projects and KVM hypervisors",
				"org.opencontainers.image.version":     o.version,
				"org.opencontainers.image.revision":    o.revision,
				"org.opencontainers.image.source":      o.source,
				"org.opencontainers.image.licenses":    "Apache-2.0",
				"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "build-image: CA certificates and time zones (Debian ca-certificates, tzdata), passwd"}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "build-image: " + binaryPath}},
	)
}

// baseLayer is the platform-independent base: the host's CA bundle and zoneinfo tree, and a
// passwd and group with root and nobody, for tools that look the user up.
func baseLayer(mtime time.Time) (v1.Layer, error) {
	var files tarFiles
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/share", "usr/share/doc", "usr/share/doc/ca-certificates", "usr/share/doc/tzdata", "tmp"} {
		files.dir(d, mtime)
	}
	files.hdrs[len(files.hdrs)-1].Mode = 0o1777 // tmp
	files.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"), mtime)
	files.file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"), mtime)
	for _, f := range baseFiles {
		err := filepath.WalkDir(f.host, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := strings.TrimPrefix(p, "/")
			switch {
			case d.IsDir():
				files.dir(name, mtime)
			case d.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				files.symlink(name, target, mtime)
			case d.Type().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				files.file(name, 0o644, b, mtime)
			default:
				return fmt.Errorf("%s: not a file, directory or symbolic link", p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files.layer()
}

// tarFiles collects a layer's entries, owned by root, in the order added.
type tarFiles struct {
	hdrs  []*tar.Header
	data  [][]byte
	names map[string]bool
}

func (t *tarFiles) add(h *tar.Header, b []byte) {
	if t.names == nil {
		t.names = map[string]bool{}
	}
	if t.names[h.Name] {
		return
	}
	t.names[h.Name] = true
	h.Format = tar.FormatPAX
	t.hdrs = append(t.hdrs, h)
	t.data = append(t.data, b)
}

func (t *tarFiles) dir(name string, mtime time.Time) {
	t.add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: mtime}, nil)
}

func (t *tarFiles) file(name string, mode int64, b []byte, mtime time.Time) {
	t.add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: mtime}, b)
}

func (t *tarFiles) symlink(name, target string, mtime time.Time) {
	t.add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime}, nil)
}

func (t *tarFiles) layer() (v1.Layer, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for i, h := range t.hdrs {
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := w.Write(t.data[i]); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// SPDX 2.3, the fields this SBOM uses (https://spdx.github.io/spdx-spec/v2.3/).
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
	// ExtractedLicenses defines every LicenseRef- the packages name (SPDX 2.3, 10).
	ExtractedLicenses []spdxExtractedLicense `json:"hasExtractedLicensingInfos,omitempty"`
}

type spdxExtractedLicense struct {
	LicenseID     string `json:"licenseId"`
	ExtractedText string `json:"extractedText"`
	Name          string `json:"name"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string            `json:"SPDXID"`
	Name             string            `json:"name"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	Supplier         string            `json:"supplier,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

func purl(locator string) []spdxExternalRef {
	return []spdxExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: locator}}
}

// spdxID makes an SPDX identifier (letters, digits, "." and "-") of a package's name.
func spdxID(kind, name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return "SPDXRef-" + kind + "-" + b.String()
}

func spdx(o options, p v1.Platform, digest v1.Hash, bin string, debs map[string]string, licenses *licenseFinder) ([]byte, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(exe)
	const na = "NOASSERTION"
	platform := platformDir(p)
	imageID := "SPDXRef-Image"
	exporterID := spdxID("Go", info.Main.Path)
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("provider-health-exporter-%s-%s", o.version, platform),
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s/%s/%s", strings.TrimSuffix(o.source, "/"), o.version, platform, digest.Hex),
		CreationInfo: spdxCreationInfo{
			Created:  o.created.Format(time.RFC3339),
			Creators: []string{"Tool: provider-health-exporter-build-image-" + o.version},
		},
		Packages: []spdxPackage{{
			SPDXID:           imageID,
			Name:             "provider-health-exporter",
			VersionInfo:      o.version,
			DownloadLocation: na,
			LicenseConcluded: na,
			LicenseDeclared:  na,
			CopyrightText:    na,
			PrimaryPurpose:   "CONTAINER",
			Checksums:        []spdxChecksum{{Algorithm: "SHA256", Value: digest.Hex}},
			ExternalRefs:     purl(fmt.Sprintf("pkg:oci/provider-health-exporter@%s?arch=%s%s&tag=%s", strings.Replace(digest.String(), ":", "%3A", 1), p.Architecture, p.Variant, tag(o.version))),
		}, {
			SPDXID:           exporterID,
			Name:             info.Main.Path,
			VersionInfo:      "v" + o.version,
			DownloadLocation: o.source,
			LicenseConcluded: na,
			LicenseDeclared:  "Apache-2.0",
			CopyrightText:    na,
			PrimaryPurpose:   "APPLICATION",
			Checksums:        []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}},
			ExternalRefs:     purl(fmt.Sprintf("pkg:golang/%s@v%s", info.Main.Path, o.version)),
		}},
		Relationships: []spdxRelationship{
			{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: imageID},
			{Element: imageID, Type: "CONTAINS", Related: exporterID},
		},
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: spdxID("Go", "stdlib"), Name: "stdlib", VersionInfo: goVersion,
		DownloadLocation: "https://go.dev/dl/", LicenseConcluded: na, LicenseDeclared: "BSD-3-Clause", CopyrightText: na,
		ExternalRefs: purl("pkg:golang/stdlib@" + goVersion),
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: exporterID, Type: "DEPENDS_ON", Related: spdxID("Go", "stdlib")})
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		id := spdxID("Go", m.Path)
		declared, err := licenses.goModule(m.Path, m.Version)
		if err != nil {
			return nil, err
		}
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: id, Name: m.Path, VersionInfo: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + path.Join(m.Path, "@v", m.Version+".zip"),
			LicenseConcluded: na, LicenseDeclared: declared, CopyrightText: na,
			ExternalRefs: purl(fmt.Sprintf("pkg:golang/%s@%s", m.Path, m.Version)),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: exporterID, Type: "DEPENDS_ON", Related: id})
	}
	names := make([]string, 0, len(debs))
	for n := range debs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		id := spdxID("Deb", n)
		declared, err := debianLicenses(n)
		if err != nil {
			return nil, err
		}
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: id, Name: n, VersionInfo: debs[n], Supplier: "Organization: Debian",
			DownloadLocation: na, LicenseConcluded: na, LicenseDeclared: declared, CopyrightText: na,
			ExternalRefs: purl(fmt.Sprintf("pkg:deb/debian/%s@%s?arch=all", n, debs[n])),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: imageID, Type: "CONTAINS", Related: id})
	}
	// Define the LicenseRefs of Debian's copyright files, pointing at the file in the image.
	for _, pkg := range doc.Packages {
		for _, id := range strings.Split(pkg.LicenseDeclared, " AND ") {
			if strings.HasPrefix(id, "LicenseRef-") && !slices.ContainsFunc(doc.ExtractedLicenses, func(e spdxExtractedLicense) bool { return e.LicenseID == id }) {
				doc.ExtractedLicenses = append(doc.ExtractedLicenses, spdxExtractedLicense{
					LicenseID: id, Name: strings.TrimPrefix(id, "LicenseRef-"),
					ExtractedText: fmt.Sprintf("The license named %q in /usr/share/doc/%s/copyright of the Debian package %s.", strings.TrimPrefix(id, "LicenseRef-"), pkg.Name, pkg.Name),
				})
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
