package gcp

import (
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// SetConnectTimeouts replaces the bounds of a checker's TCP connect and TLS handshake, so that
// tests need not wait the production 10 seconds. Call it before the first check.
func SetConnectTimeouts(c checks.Checker, dial, tlsHandshake time.Duration) {
	cc := c.(*Checker)
	cc.dialer.Timeout = dial
	cc.base.TLSHandshakeTimeout = tlsHandshake
}

// Classify is classify, for the unit test of transport failures a test server cannot produce
// on demand.
var Classify = classify
