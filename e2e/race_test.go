//go:build race

package e2e

// raceEnabled: this test binary has the race detector, so the exporter it runs is built with it.
const raceEnabled = true
