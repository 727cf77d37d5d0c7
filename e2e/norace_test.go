//go:build !race

package e2e

// raceEnabled: this test binary has no race detector, nor has the exporter it runs.
const raceEnabled = false
