package deploy_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// TestSizingTable keeps docs/deploy.md's sizing by fleet size consistent with the code and with
// itself: the concurrency column is the default the config derives for that many hosts, the
// file-descriptor limit leaves room for one per host (and more), and the memory limit is at
// least the request.
func TestSizingTable(t *testing.T) {
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| ([0-9,]+) \| ([0-9]+)Mi \| ([0-9]+)(Mi|Gi) \| [0-9]+m \| [0-9]+m? \| ([0-9]+) \| ([0-9]+) \(the default\) \|$`)
	rows := row.FindAllStringSubmatch(string(b), -1)
	if len(rows) != 3 {
		t.Fatalf("found %d rows of the sizing table, want 3 (100, 1,000, 5,000 hosts)", len(rows))
	}
	num := func(s string) int {
		n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, r := range rows {
		hosts, request, limit, fds, conc := num(r[1]), num(r[2]), num(r[3]), num(r[5]), num(r[6])
		if r[4] == "Gi" {
			limit *= 1024
		}
		if want := kvm.DefaultConcurrencyFor(hosts); conc != want {
			t.Errorf("%d hosts: concurrency %d in the table, the default is %d", hosts, conc, want)
		}
		if fds < 3*hosts {
			t.Errorf("%d hosts: ulimit -n %d leaves no room for one descriptor per host and the rest", hosts, fds)
		}
		if limit < request {
			t.Errorf("%d hosts: memory limit %dMi below the request %dMi", hosts, limit, request)
		}
	}
}
