package promstack

import "testing"

func TestPrometheusRelease(t *testing.T) {
	for in, want := range map[string]string{
		"v0.316.0":      "3.16.0",
		"v0.300.1":      "3.0.1",
		"v0.401.2":      "4.1.2",
		"v0.55.1":       "0.55.1", // a 2.x-era module version has no release encoded in it
		"v1.2.3":        "1.2.3",
		"v0.316.0-rc.0": "3.16.0-rc.0",
	} {
		if got := prometheusRelease(in); got != want {
			t.Errorf("prometheusRelease(%q) = %q, want %q", in, got, want)
		}
	}
}
