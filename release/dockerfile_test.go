package release

import (
	"bufio"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// dockerfile is what the test reads of the Dockerfile: ARG defaults, COPY, USER, EXPOSE, ENTRYPOINT.
type dockerfile struct {
	args       map[string]string
	copies     [][2]string // source, destination
	user       string
	expose     []string
	entrypoint string
	from       string
}

func parseDockerfile(t *testing.T, file string) dockerfile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := dockerfile{args: map[string]string{}}
	var logical string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			logical += cont + " "
			continue
		}
		logical += line
		instr, rest, _ := strings.Cut(logical, " ")
		rest = strings.TrimSpace(rest)
		logical = ""
		expand := func(s string) string {
			return os.Expand(s, func(k string) string { return d.args[k] })
		}
		switch strings.ToUpper(instr) {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			d.args[k] = strings.Trim(v, `"`)
		case "FROM":
			d.from = expand(rest)
		case "COPY", "ADD":
			if strings.ToUpper(instr) == "ADD" {
				t.Errorf("the Dockerfile uses ADD %s: COPY the binary, nothing fetched or unpacked", rest)
			}
			fields := strings.Fields(expand(rest))
			if len(fields) != 2 {
				t.Fatalf("COPY %s: want one source and one destination", rest)
			}
			d.copies = append(d.copies, [2]string{fields[0], fields[1]})
		case "USER":
			d.user = rest
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(rest)...)
		case "ENTRYPOINT":
			m := regexp.MustCompile(`^\[\s*"([^"]+)"\s*\]$`).FindStringSubmatch(rest)
			if m == nil {
				t.Fatalf("ENTRYPOINT %s: want the exec form with the binary alone", rest)
			}
			d.entrypoint = m[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// dockerignored applies .dockerignore's rules to a path of the build context the way Docker
// does: patterns in order, the last one matching the path or one of its parent directories
// wins, "!" re-includes.
func dockerignored(rules []string, p string) bool {
	excluded := false
	for _, rule := range rules {
		neg := strings.HasPrefix(rule, "!")
		pattern := path.Clean(strings.TrimPrefix(rule, "!"))
		for dir := p; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if ok, _ := path.Match(pattern, dir); ok {
				excluded = !neg
				break
			}
		}
	}
	return excluded
}

// TestDockerfile checks what can be checked without a Docker engine: `make docker-binary` (what
// `make docker` runs first) builds, through promu, the very file the Dockerfile copies at its
// default ARCH and OS, a static linux executable of this version; the image copies that binary
// and nothing else, runs it as a non-root user on the default port; .dockerignore sends the
// build nothing but that binary; `make docker` passes the same ARCH and OS to the build.
func TestDockerfile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is built on linux")
	}
	d := parseDockerfile(t, "Dockerfile")
	if len(d.copies) != 1 {
		t.Fatalf("the Dockerfile copies %v, want the binary alone", d.copies)
	}
	src, dst := d.copies[0][0], d.copies[0][1]
	if want := ".build/" + d.args["OS"] + "-" + d.args["ARCH"] + "/provider_health_exporter"; src != want || d.args["OS"] != "linux" {
		t.Errorf("COPY source %s, want promu's layout %s (OS linux)", src, want)
	}
	if d.entrypoint != dst {
		t.Errorf("ENTRYPOINT %s, want the copied binary %s", d.entrypoint, dst)
	}
	if !strings.Contains(d.from, "quay.io/prometheus/busybox-linux-amd64") {
		t.Errorf("FROM %s, want Prometheus's busybox base for linux-amd64 at the default ARGs", d.from)
	}
	if uid, _, _ := strings.Cut(d.user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("USER %q: want a non-root user", d.user)
	}
	if _, port, _ := strings.Cut(exporter.DefaultListenAddress, ":"); len(d.expose) != 1 || d.expose[0] != port {
		t.Errorf("EXPOSE %v, want the default port %s", d.expose, port)
	}

	raw, err := os.ReadFile(".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			rules = append(rules, l)
		}
	}
	if dockerignored(rules, src) {
		t.Errorf(".dockerignore excludes %s, the file the Dockerfile copies", src)
	}
	for _, p := range []string{"go.mod", "main.go", "testdata/providers.yml", ".git/config", "bin/kube-v1.37.2/etcd", ".build/linux-amd64/other"} {
		if !dockerignored(rules, p) {
			t.Errorf(".dockerignore sends %s to the build: the image needs the binary alone", p)
		}
	}

	makePath, err := exec.LookPath("make")
	if err != nil {
		testenv.Unavailable(t, "no make on PATH: install Debian's make package")
	}
	arch := d.args["ARCH"]
	dry, err := exec.Command(makePath, "-n", "docker", "DOCKER_ARCH="+arch).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n docker: %v\n%s", err, dry)
	}
	// promu runs as built for this machine (go tool -n promu), whatever GOARCH the exporter is for.
	for _, want := range []string{"GOOS=linux GOARCH=" + arch + " ", ` -n promu)" build --prefix ` + path.Dir(src), `--build-arg ARCH="` + arch + `"`, "--build-arg OS=linux"} {
		if !strings.Contains(string(dry), want) {
			t.Errorf("make docker does not run %q:\n%s", want, dry)
		}
	}
	if runtime.GOARCH != arch {
		t.Skipf("building the %s binary on %s is not checked here", arch, runtime.GOARCH)
	}
	testenv.SkipIfShort(t, "builds the binary with make docker-binary (promu)")

	// Build as `make docker` does, into a copy of nothing: promu writes into the worktree's
	// .build/, which is ignored by git.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := os.Remove(src); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, makePath, "docker-binary", "DOCKER_ARCH="+arch).CombinedOutput()
	if err != nil {
		t.Fatalf("make docker-binary: %v\n%s", err, out)
	}
	bin, err := elf.Open(src)
	if err != nil {
		t.Fatalf("make docker-binary did not build %s: %v\n%s", src, err, out)
	}
	defer bin.Close()
	if bin.Machine != elf.EM_X86_64 || bin.OSABI != elf.ELFOSABI_NONE && bin.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s is for machine %v, OS ABI %v; want x86-64 linux", src, bin.Machine, bin.OSABI)
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked: the busybox image has no C library to load it with", src)
		}
	}
	abs, _ := filepath.Abs(src)
	version, err := exec.CommandContext(ctx, abs, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", src, err, version)
	}
	want, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(version), "version "+strings.TrimSpace(string(want))) {
		t.Errorf("%s --version does not carry VERSION (%s): promu did not stamp it\n%s", src, strings.TrimSpace(string(want)), version)
	}
}
