package charts

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// sizingRow is one row of docs/deploy.md's sizing table.
type sizingRow struct {
	line                             int
	hosts, replicas                  int
	steadyMiB, worstMiB              float64 // measured: a replica's resident memory, its peak in the worst case
	memRequest, memLimit, cpuRequest resource.Quantity
	cpuLimit                         resource.Quantity
	text                             string
}

// sizingTable reads the rows between docs/deploy.md's markers <!-- sizing: begin --> and
// <!-- sizing: end -->: | KVM hosts | replicas | hosts per replica, steady / worst | resident
// MiB, steady | peak MiB, worst | memory request | memory limit | CPU request | CPU limit | ...
func sizingTable(t *testing.T) []sizingRow {
	t.Helper()
	doc := readFile(t, filepath.Join(testutil.RepoRoot(t), "docs", "deploy.md"))
	begin, end := bytes.Index(doc, []byte("<!-- sizing: begin -->")), bytes.Index(doc, []byte("<!-- sizing: end -->"))
	if begin < 0 || end < begin {
		t.Fatal("docs/deploy.md: no sizing table between <!-- sizing: begin --> and <!-- sizing: end -->")
	}
	first := bytes.Count(doc[:begin], []byte("\n")) + 1
	var rows []sizingRow
	for i, line := range strings.Split(string(doc[begin:end]), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 9 || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		for j := range cells {
			cells[j] = strings.Trim(strings.TrimSpace(cells[j]), "*`")
		}
		hosts, err := strconv.Atoi(strings.ReplaceAll(cells[0], ",", ""))
		if err != nil {
			continue // the header and its rule
		}
		r := sizingRow{line: first + i, hosts: hosts, text: line}
		fail := func(what string, err error) { t.Errorf("docs/deploy.md:%d: %s: %v", r.line, what, err) }
		if r.replicas, err = strconv.Atoi(cells[1]); err != nil {
			fail("replicas", err)
		}
		if r.steadyMiB, err = strconv.ParseFloat(strings.ReplaceAll(cells[3], ",", ""), 64); err != nil {
			fail("steady resident MiB", err)
		}
		if r.worstMiB, err = strconv.ParseFloat(strings.ReplaceAll(cells[4], ",", ""), 64); err != nil {
			fail("worst-case peak MiB", err)
		}
		for _, q := range []struct {
			cell string
			to   *resource.Quantity
		}{{cells[5], &r.memRequest}, {cells[6], &r.memLimit}, {cells[7], &r.cpuRequest}, {cells[8], &r.cpuLimit}} {
			v, err := resource.ParseQuantity(q.cell)
			if err != nil {
				fail("quantity "+q.cell, err)
			}
			*q.to = v
		}
		rows = append(rows, r)
	}
	return rows
}

func mib(q resource.Quantity) float64 { return float64(q.Value()) / (1 << 20) }

// TestSizingTableMatchesDefaults keeps docs/deploy.md's sizing table, the chart's defaults and
// deploy/ from disagreeing: every row's memory limit is above the peak measured in its worst case
// (a replica lost: fleet/(N-1)) with a tenth to spare, its request at least the steady resident
// memory measured, the rows cover 500, 3,000, 10,000 and 50,000 hosts, and the chart's default
// replicas and resources (and deploy/'s) are those of a row.
func TestSizingTableMatchesDefaults(t *testing.T) {
	rows := sizingTable(t)
	covered := map[int]bool{}
	for _, r := range rows {
		covered[r.hosts] = true
		if mib(r.memLimit) < 1.1*r.worstMiB {
			t.Errorf("docs/deploy.md:%d: memory limit %s is not a tenth above the peak measured in the worst case (%.0f MiB)", r.line, r.memLimit.String(), r.worstMiB)
		}
		if mib(r.memRequest) < r.steadyMiB {
			t.Errorf("docs/deploy.md:%d: memory request %s is below the resident memory measured at steady state (%.0f MiB)", r.line, r.memRequest.String(), r.steadyMiB)
		}
		if r.memRequest.Cmp(r.memLimit) > 0 || r.cpuRequest.Cmp(r.cpuLimit) > 0 {
			t.Errorf("docs/deploy.md:%d: a request above its limit", r.line)
		}
	}
	for _, n := range []int{500, 3000, 10000, 50000} {
		if !covered[n] {
			t.Errorf("docs/deploy.md's sizing table has no row for %d hosts", n)
		}
	}

	match := func(what string, replicas int64, ctr map[string]any) {
		t.Helper()
		res, _ := ctr["resources"].(map[string]any)
		get := func(kind, name string) resource.Quantity {
			m, _ := res[kind].(map[string]any)
			q, err := resource.ParseQuantity(fmt.Sprint(m[name]))
			if err != nil {
				t.Errorf("%s: resources.%s.%s %v: %v", what, kind, name, m[name], err)
			}
			return q
		}
		mr, ml, cr, cl := get("requests", "memory"), get("limits", "memory"), get("requests", "cpu"), get("limits", "cpu")
		for _, r := range rows {
			if int64(r.replicas) == replicas && r.memRequest.Cmp(mr) == 0 && r.memLimit.Cmp(ml) == 0 &&
				r.cpuRequest.Cmp(cr) == 0 && r.cpuLimit.Cmp(cl) == 0 {
				return
			}
		}
		t.Errorf("%s: %d replicas with memory %s/%s and CPU %s/%s: no row of docs/deploy.md's sizing table says so",
			what, replicas, mr.String(), ml.String(), cr.String(), cl.String())
	}

	objs := objects(kube.DecodeObjects(t, newHelm(t).template()))
	dep := objs.get(t, "Deployment", namespace, release)
	ctr, _ := container(t, objs)
	match("the chart's defaults", replicasOf(dep), ctr)

	for _, o := range kube.DecodeObjects(t, readFile(t, filepath.Join(testutil.RepoRoot(t), "deploy", "deployment.yaml"))) {
		if o.GetKind() != "Deployment" {
			continue
		}
		replicas := replicasOf(o)
		ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(ctrs) == 0 {
			t.Fatal("deploy/deployment.yaml: no container")
		}
		match("deploy/deployment.yaml", replicas, ctrs[0].(map[string]any))
	}
}

// replicasOf is a Deployment's spec.replicas, however the decoder typed the number.
func replicasOf(o *unstructured.Unstructured) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
