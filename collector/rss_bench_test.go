package collector

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// BenchmarkExporterRSS10000Targets runs the real exporter binary with 10,000 KVM targets (10
// providers of 1,000 hosts) and reports its resident memory (VmRSS) once the first round is
// done and Prometheus-style scrapes (OpenMetrics, gzip) have been served. The hosts are
// loopback addresses on a closed port, so every check fails at once (TCPUnreachable): 5 series
// per target, 50,000 in all. The binary is built from this module, or is $EXPORTER_BINARY
// when set (to measure another build the same way).
func BenchmarkExporterRSS10000Targets(b *testing.B) {
	dir := b.TempDir()
	bin := os.Getenv("EXPORTER_BINARY")
	if bin == "" {
		bin = filepath.Join(dir, "provider-health-exporter")
		if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
			b.Fatalf("build the exporter: %v\n%s", err, out)
		}
	}
	config := writeFleetProviders(b, dir, 10, 1000)
	for b.Loop() {
		rss, body := measureExporter(b, bin, config)
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(body)/(1<<10), "gzip-KiB")
	}
}

// writeFleetProviders writes a providers file of kvm providers whose hosts are distinct
// loopback addresses on port 1, where nothing listens.
func writeFleetProviders(b *testing.B, dir string, providers, hosts int) string {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		b.Fatal(err)
	}
	keyFile := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("providers:\n")
	for p := range providers {
		fmt.Fprintf(&sb, "  - name: kvm-%02d\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: %s\n"+
			"      insecureSkipHostKeyVerification: true\n      storagePool: default\n      concurrency: 1024\n      hosts:\n",
			p, keyFile)
		for h := range hosts {
			fmt.Fprintf(&sb, "        - address: 127.%d.%d.%d:1\n          name: hv-%02d-%04d.example.internal\n",
				10+p, h/256, h%256, p, h)
		}
	}
	path := filepath.Join(dir, "providers.yml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// measureExporter starts the exporter, waits for its first round, scrapes it twice as
// Prometheus does and returns its VmRSS and the size of the (compressed) scrape.
func measureExporter(b *testing.B, bin, config string) (rss uint64, body int) {
	addr := itestutil.MustFreeLoopbackAddr(b)
	cmd := exec.Command(bin, "--config.file="+config, "--web.listen-address="+addr,
		"--provider-check-interval=1h", "--log.level=error")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	p := itestutil.StartProcess(b, cmd)
	defer func() {
		_ = cmd.Process.Kill()
		_ = p.Wait()
	}()

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := client.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if p.Exited() {
			b.Fatalf("the exporter exited: %v", p.Wait())
		}
		if time.Now().After(deadline) {
			b.Fatal("the exporter's first round did not finish within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 2 {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Accept", acceptPrometheus)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
		}
		if !strings.Contains(string(gunzip(b, data)), "proxy_operator_provider_target_up{") {
			b.Fatal("the scrape has no target_up series")
		}
		body = len(data)
	}
	return vmRSSOf(b, fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)), body
}

// gunzip decompresses a gzip body.
func gunzip(tb testing.TB, b []byte) []byte {
	tb.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		tb.Fatalf("gzip header: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatalf("gzip body: %v", err)
	}
	return out
}
