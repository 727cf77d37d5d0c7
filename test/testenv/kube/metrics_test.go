package kube

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// randomText is n characters of base64 of random bytes.
func randomText(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// TestControlPlaneMetrics writes, lists and watches ConfigMaps of a known size and finds at
// least those bytes in what EtcdMetrics and APIServerMetrics read: received and written by etcd,
// answered by the API server to the LIST and in watch events.
func TestControlPlaneMetrics(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	const n, size = 8, 16 << 10
	read := func() (etcd, api Metrics) {
		t.Helper()
		etcd, err := env.EtcdMetrics()
		if err != nil {
			t.Fatal(err)
		}
		api, err = env.APIServerMetrics()
		if err != nil {
			t.Fatal(err)
		}
		return etcd, api
	}
	etcd0, api0 := read()
	w, err := admin.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{LabelSelector: "metrics-test=1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range n {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-" + strconv.Itoa(i), Labels: map[string]string{"metrics-test": "1"}},
			Data:       map[string]string{"payload": randomText(t, size)},
		}
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case <-w.ResultChan():
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d watch events seen in a minute", i, n)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "metrics-test=1"}); err != nil {
		t.Fatal(err)
	}
	etcd1, api1 := read()

	const written = n * size
	for _, name := range []string{"etcd_network_client_grpc_received_bytes_total", "etcd_disk_wal_write_bytes_total"} {
		if d := etcd1.Sum(name) - etcd0.Sum(name); d < written {
			t.Errorf("etcd %s grew by %.0f, want at least the %d bytes written", name, d, written)
		}
	}
	// The API server gzips a large answer to a client that accepts it, as client-go does, and
	// counts the bytes it sent: random base64 text keeps three quarters of its size.
	list := "apiserver_response_sizes_sum"
	if d := api1.Sum(list, "verb", "LIST", "resource", "configmaps") - api0.Sum(list, "verb", "LIST", "resource", "configmaps"); d < written/2 {
		t.Errorf("%s{verb=LIST,resource=configmaps} grew by %.0f, want at least half the %d bytes listed", list, d, written)
	}
	watch := "apiserver_watch_events_sizes_sum"
	if d := api1.Sum(watch, "resource", "configmaps") - api0.Sum(watch, "resource", "configmaps"); d < written {
		t.Errorf("%s{resource=configmaps} grew by %.0f, want at least the %d bytes sent", watch, d, written)
	}
	if got := api1.Sum("apiserver_watch_events_sizes_count", "resource", "configmaps") - api0.Sum("apiserver_watch_events_sizes_count", "resource", "configmaps"); got < n {
		t.Errorf("apiserver_watch_events_sizes_count{resource=configmaps} grew by %.0f, want at least %d", got, n)
	}
	if got := api1.Sum("no_such_metric"); got != 0 {
		t.Errorf("a family the reading lacks sums to %v, want 0", got)
	}
}
