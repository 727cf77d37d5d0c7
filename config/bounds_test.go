package config_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// AliasBomb is a host file of about 32 KB whose one anchored list of 1,000 bad targets is
// reused 1,000 times: about a million problems if every one were kept.
func aliasBomb() []byte {
	var b strings.Builder
	b.WriteString("- targets: &bad [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("x")
	}
	b.WriteString("]\n")
	for range 1000 {
		b.WriteString("- targets: *bad\n")
	}
	return []byte(b.String())
}

// TestTargetFileProblemCeiling: the alias bomb reports MaxProblems problems and one line
// counting the rest, and the whole error stays small.
func TestTargetFileProblemCeiling(t *testing.T) {
	_, err := config.ParseTargetFile("bomb.yml", aliasBomb(), func(string) string { return "invalid address" })
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("error = %v; want Errors", err)
	}
	if len(es) != config.MaxProblems+1 {
		t.Fatalf("%d entries; want %d problems and one counting the rest", len(es), config.MaxProblems)
	}
	last := es[len(es)-1]
	if !strings.HasPrefix(last.Msg, "and ") || !strings.HasSuffix(last.Msg, "more problems (the first 20 are shown)") {
		t.Errorf("last entry = %q; want the count of the rest", last.Error())
	}
	if n := len(err.Error()); n > 8<<10 {
		t.Errorf("the error is %d bytes; want at most 8 KiB", n)
	}
}

// TestProvidersFileProblemCeiling: a providers file with thousands of bad providers reports
// MaxProblems problems and the count of the rest; every message is at most MaxMessageLen.
func TestProvidersFileProblemCeiling(t *testing.T) {
	var b strings.Builder
	b.WriteString("providers:\n")
	for range 5000 {
		b.WriteString("- {name: Bad_Name, type: nope}\n")
	}
	_, err := config.Parse("providers.yml", []byte(b.String()))
	var es config.Errors
	if !errors.As(err, &es) || len(es) != config.MaxProblems+1 {
		t.Fatalf("got %d entries (%v); want %d and the count of the rest", len(es), err, config.MaxProblems+1)
	}
	if want := "providers.yml: and 9980 more problems (the first 20 are shown)"; es[len(es)-1].Error() != want {
		t.Errorf("last = %q; want %q", es[len(es)-1].Error(), want)
	}
	if es[0].Line != 2 {
		t.Errorf("first problem at line %d; want the file's first (2)", es[0].Line)
	}
	long := "providers:\n- name: " + strings.Repeat("a", 100_000) + "\n  type: [" + strings.Repeat("b", 100_000) + "\n"
	_, err = config.Parse("providers.yml", []byte(long))
	if !errors.As(err, &es) {
		t.Fatalf("error = %v; want Errors", err)
	}
	for _, e := range es {
		if len(e.Msg) > config.MaxMessageLen {
			t.Errorf("message of %d bytes; want at most %d", len(e.Msg), config.MaxMessageLen)
		}
	}
}

// TestLoadRefusesSpecialAndLargeFiles: the providers file is read only when it is a regular
// file of at most the limit; a FIFO, a socket and /dev/zero are refused at once, naming the
// file and its kind; a 7 MB file is refused by its size, naming the flag.
func TestLoadRefusesSpecialAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	zero := filepath.Join(dir, "zero.yml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{fifo: "a named pipe (FIFO)", sock: "a socket", zero: "a character device"} {
		_, err := config.Load(path)
		want := "reading providers file: " + path + " is " + kind + ", not a regular file: only regular files are read"
		if err == nil || err.Error() != want {
			t.Errorf("Load(%s) = %v; want %q", filepath.Base(path), err, want)
		}
		if _, err := config.ReadTargetFile(path, 1<<20, 0, nil); !strings.Contains(fmtErr(err), kind) {
			t.Errorf("ReadTargetFile(%s) = %v; want it refused as %s", filepath.Base(path), err, kind)
		}
	}

	big := filepath.Join(dir, "big.yml")
	entry := "- {name: Bad_Name, type: nope, kvm: {hosts: [{address: \"not an address\"}]}}\n"
	data := "providers:\n" + strings.Repeat(entry, 7_000_000/len(entry))
	if err := os.WriteFile(big, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(big)
	var tl *fileread.TooLargeError
	if !errors.As(err, &tl) || !strings.HasSuffix(err.Error(), "larger than the limit of 1MiB (--config.max-size)") {
		t.Errorf("Load of a 7 MB file = %v; want it refused by size, naming --config.max-size", err)
	}
	// Let through with a larger limit, it reports bounded problems.
	_, err = config.LoadWith(big, 0, 8<<20)
	var es config.Errors
	if !errors.As(err, &es) || len(es) != config.MaxProblems+1 || len(err.Error()) > 16<<10 {
		t.Errorf("a 7 MB bad file under a larger limit: %d entries, %d bytes; want %d entries, at most 16 KiB", len(es), len(fmtErr(err)), config.MaxProblems+1)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
