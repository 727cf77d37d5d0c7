// Package checks holds the contract between the exporter and its provider checks: the Checker
// interface, the verdict of one target (TargetResult), the closed catalogue of reasons, and the
// immutable Snapshot a round of checks produces. The round runner lives here too; one
// sub-package per provider type implements Checker.
package checks

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// ProviderType is the kind of infrastructure a provider is. The providers file's `type` field.
type ProviderType string

// Reason is one CamelCase word that explains a verdict. ReasonReady means up; every other
// reason means down. The same word appears in the reason metric label, the ProviderHealth
// resource, the logs and the docs.
type Reason string

// Reasons every provider type reports. The reasons below these are shared by several types;
// a reason only one type reports is declared in that type's package.
const (
	ReasonReady   Reason = "Ready"
	ReasonTimeout Reason = "Timeout"
	// ReasonMaintenance is a target deliberately out of service: the operator's maintenance
	// label (config.MaintenanceLabel, every type; the runner sets it) or the provider's own
	// state (vSphere: a host in maintenance mode). It is not up, but it is not down either: the
	// down alerts, the ProviderHealth Ready condition's count of down targets and the
	// availability leave it out. It takes effect and ends at once, whatever the thresholds.
	// Every type's catalogue lists it (Register adds MaintenanceMeaning where a type does not).
	ReasonMaintenance Reason = "Maintenance"
)

// MaintenanceMeaning is the meaning of ReasonMaintenance in a catalogue that does not give its
// own.
const MaintenanceMeaning = "The target is deliberately out of service: its `maintenance` label (a provider's or its own) is `true` or an end time not reached yet. Neither up nor counted as down; it is still checked, and the message keeps what the last check found."

// Reasons of API-backed providers (kubernetes, gcp, vsphere).
const (
	ReasonUnauthorized   Reason = "Unauthorized"
	ReasonForbidden      Reason = "Forbidden"
	ReasonAPIUnreachable Reason = "APIUnreachable"
	ReasonAPIError       Reason = "APIError"
)

// ReasonCredentialsError is credentials a provider type reads from files that cannot be used
// (gcp, vsphere).
const ReasonCredentialsError Reason = "CredentialsError"

// TargetResult is the verdict of one check of one target.
type TargetResult struct {
	Target string
	// Up is true exactly when Reason is ReasonReady.
	Up     bool
	Reason Reason
	// Message is for humans: never a metric label, never a secret. The runner sanitizes it
	// (Sanitize: secret files' contents and credential shapes redacted, control characters
	// turned into spaces, at most MaxMessageLen bytes); a type sanitizes it itself before it
	// logs it or answers a probe with it.
	Message string
	// Duration is how long the check of this target took.
	Duration time.Duration
	// CheckedAt is when the check of this target completed (pass or fail). The runner fills it
	// when the checker leaves it zero.
	CheckedAt time.Time
	// NotContacted says the check made no contact with the target this round: the runner keeps
	// the CheckedAt of the last check that contacted the target, so that the check timestamp
	// moves only when the target was contacted. Alone (without NotStarted) it is a check that
	// could not contact the target because an earlier call to it is still outstanding (abandoned
	// at a deadline, not returned: a hung daemon): a continuing Timeout, which counts as a failed
	// check toward the thresholds and in the check counters.
	NotContacted bool
	// NotStarted says the check of this target did not start this round: its turn did not come
	// before the round's deadline (the provider's concurrency slots were all taken), or another
	// caller's check of it was running. Nothing was learned about the target, so the round is
	// not a check of it: the runner neither counts it toward failureThreshold and
	// successThreshold nor in the check counters, and keeps the published verdict, reason and
	// message (a target without a verdict stays unchecked, see ProviderState.Unchecked). The
	// runner sets NotContacted for it too; Reason and Message say why it was not started.
	NotStarted bool
	// Samples are the values of the provider type's own gauges (Type.Gauges) for the target,
	// from this check: none when the check did not read them.
	Samples []Sample
}

// Checker checks one provider. Check never fails as a whole: every problem is a verdict on a
// target. It must return promptly once ctx is done; one that does not is abandoned by the runner,
// whose Timeout verdicts stand for it.
type Checker interface {
	// Name is the provider's name from the providers file.
	Name() string
	// Type is the provider's type.
	Type() ProviderType
	// Targets lists the targets Check reports on, so that the runner can fill Timeout verdicts
	// for a checker that did not return in time.
	Targets() []string
	// Check checks every target once and returns one result per target.
	Check(ctx context.Context) []TargetResult
}

// Optional abilities of a Checker, besides the interface itself: the runner and the exporter
// find them by type assertion, and every one of them is declared here.

// Retargeter is a checker that can hand its connections to the checker of a changed version of
// its provider (kvm: when only the host list changed). The new checker shares what carries
// over; closing the old one then closes only what the new one does not use. ok false means
// the change needs a new checker.
type Retargeter interface {
	Retarget(config.Provider, *slog.Logger) (c Checker, ok bool)
}

// Staler is a checker that asks to be rebuilt at a reload although its providers-file block
// did not change (it could not be built from what it read).
type Staler interface {
	Stale() bool
}

// Closer is a checker that holds resources (connections, sessions): the exporter closes it
// when its provider is removed or changed by a reload, and at exit. Close is idempotent, and
// may be called while a Check abandoned at a deadline is still running: it must not wait for
// that call, and the call must then return promptly.
type Closer interface {
	io.Closer
}

// SubsetChecker is an optional ability of a Checker of a PerTarget type: check some of its
// targets only. A sharded replica (--shard.enabled) checks only the targets it owns;
// CheckTargets is Check restricted to targets (a subset of Targets()), one result per target.
// A PerTarget checker without it is checked whole and the results of the targets this replica
// does not own are dropped.
//
// A sharded replica calls it every round, with no target when it owns none of the provider's:
// whatever the checker holds for a target outside targets (a connection) it may release.
type SubsetChecker interface {
	CheckTargets(ctx context.Context, targets []string) []TargetResult
}

// TargetProber is an optional ability of a Checker: check one of its targets now, on demand
// (the exporter's /probe endpoint), through the same machinery as the rounds but outside them.
// A probe's verdict is returned only: it never enters the runner's memory, so the snapshot, the
// metrics and the ProviderHealth objects do not change.
type TargetProber interface {
	// ProbeTarget checks target once, within ctx. trace, when not nil, receives the stages of
	// the check. The error is ErrUnknownTarget for a target the checker does not list, or
	// ErrBusy when the target could not be checked before ctx ended because another check of
	// it held it (the verdict is then not about the target); otherwise nil, and the verdict is
	// the target's.
	ProbeTarget(ctx context.Context, target string, trace *Trace) (TargetResult, error)
}

// ProbeLimiter is an optional ability of a TargetProber: how many on-demand probes of its
// provider may run at once, sized from what the provider can take (a kvm provider: its
// concurrency). A prober without it gets DefaultProbeLimit.
type ProbeLimiter interface {
	ProbeLimit() int
}
