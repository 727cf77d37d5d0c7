package main

// What the exporter does in the cluster it runs in, each behind its flags: sharing the targets
// between replicas (--shard.*) and mirroring the verdicts into ProviderHealth objects (--crd.*).

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/internal/incluster"
	"github.com/provider-health-exporter/provider-health-exporter/shard"
)

// holderPod is the pod this runs in, from the downward API ($POD_NAME, $POD_UID), so that it
// owns the writer's Lease while holding it; nil outside a pod.
func holderPod() *crdwriter.PodRef {
	name, uid := os.Getenv("POD_NAME"), os.Getenv("POD_UID")
	if name == "" || uid == "" {
		return nil
	}
	return &crdwriter.PodRef{Namespace: incluster.PodNamespace(), Name: name, UID: uid}
}

// shardIdentity is --shard.identity, or the pod's name ($POD_NAME), or the host name.
func shardIdentity(o shardOptions) string {
	if o.identity != "" {
		return o.identity
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return programName
	}
	return strings.ToLower(host)
}

// shardLinger is how long a sharded replica that leaves goes on serving after it deleted its
// Lease: the others see it gone at their next read of the members (a retry period, two for a
// read in flight) and check its targets in a round they start at once (Runner.RunSoon), for
// which a few seconds are left; at most half of shutdownTimeout, which bounds the whole exit.
// 0 when sharding is off.
func shardLinger(o shardOptions) time.Duration {
	if !o.enabled {
		return 0
	}
	return min(2*o.retryPeriod+3*time.Second, shutdownTimeout-shardStepTimeout-shutdownReserve)
}

// shardStepTimeout bounds each of the shard's steps at exit (releasing the Lease, deleting it and
// the part), whatever the API server does, so that the whole exit stays within shutdownTimeout.
const shardStepTimeout = 2 * time.Second

// startSharding makes e check only the targets this replica owns and starts following the
// shard's members (--shard.enabled). It returns the ProviderHealth writer's source: the
// fleet's snapshots when sharded, else the runner's. release stops following the members and
// releases the replica's Lease (within ctx and shardStepTimeout): call it first at shutdown, so
// that the others take over at once; remove deletes the Lease and the part: call it last, once
// the others have read its part.
func startSharding(o shardOptions, instance string, interval time.Duration, e *exporter.Exporter, logger *slog.Logger) (source crdwriter.Source, release, remove func(context.Context), err error) {
	if !o.enabled {
		return e.Runner(), func(context.Context) {}, func(context.Context) {}, nil
	}
	cfg, err := ownClientConfig(o.kubeconfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--shard.kubeconfig=%q: %w", o.kubeconfig, err)
	}
	cfg.UserAgent = programName
	identity := shardIdentity(o)
	logger = logger.With("component", "shard", "identity", identity, "instance", instance)
	s, err := shard.New(shard.Options{
		Config:        cfg,
		Namespace:     cmp.Or(o.leaseNamespace, incluster.PodNamespace()),
		Identity:      identity,
		Instance:      instance,
		LeaseDuration: o.leaseDuration,
		RenewDeadline: o.renewDeadline,
		RetryPeriod:   o.retryPeriod,
		Logger:        logger,
		Owner:         podOwner(identity),
		Runner:        e.Runner(),
		Checkers:      e.Checkers,
		Interval:      interval,
		Working:       e.Working,
		Registerer:    e.Registry(),
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := s.Join(context.Background()); err != nil {
		logger.Warn("cannot join the shard yet: checking nothing and not ready until the API server answers", "err", err)
	}
	e.Readiness = s.Ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	logger.Info("sharding on: checking the targets this replica owns")
	bounded := func(ctx context.Context, f func(context.Context)) {
		ctx, cancel := context.WithTimeout(ctx, shardStepTimeout)
		defer cancel()
		f(ctx)
	}
	return s.Fleet(), func(ctx context.Context) {
			cancel()
			<-done
			bounded(ctx, func(ctx context.Context) { _ = s.Release(ctx) })
		}, func(ctx context.Context) {
			bounded(ctx, s.Delete)
		}, nil
}

// podOwner is the owner of the shard's Lease and part in a pod: the pod named identity, when
// $POD_UID (the downward API's metadata.uid) is set and $POD_NAME names it; nil elsewhere.
func podOwner(identity string) *metav1.OwnerReference {
	uid := os.Getenv("POD_UID")
	if uid == "" || os.Getenv("POD_NAME") != identity {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: identity, UID: types.UID(uid)}
}

// startCRDWriter starts mirroring source's snapshots (startSharding's) into ProviderHealth
// objects, or, with checks off, deletes ours (RunChecksOff). The returned channel is closed
// when it has stopped (ctx done).
func startCRDWriter(ctx context.Context, o crdOptions, e *exporter.Exporter, source crdwriter.Source, interval time.Duration, logger *slog.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	if !o.enabled {
		close(done)
		return done, nil
	}
	cfg, err := ownClientConfig(o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--crd.kubeconfig=%q: %w", o.kubeconfig, err)
	}
	cfg.UserAgent = programName
	logger = logger.With("component", "crdwriter", "instance", o.instance)
	w, err := crdwriter.New(crdwriter.Options{
		Config:            cfg,
		Source:            source,
		Logger:            logger,
		Instance:          o.instance,
		Interval:          interval,
		HeartbeatInterval: o.heartbeatInterval,
		MinReasonInterval: cmp.Or(o.minReasonInterval, -1), // 0: none
		LeaderElect:       o.leaderElect,
		LeaseNamespace:    o.leaseNamespace,
		LeaseName:         o.leaseName,
		HolderPod:         holderPod(),
		Registerer:        e.Registry(),
	})
	if err != nil {
		return nil, err
	}
	e.CRDReport = w.Report
	go func() {
		defer close(done)
		if !e.ChecksOn() {
			// Checks off: no verdicts to mirror, and this instance's objects would only go
			// stale.
			if err := w.RunChecksOff(ctx); err != nil && ctx.Err() == nil {
				logger.Error("cannot delete the ProviderHealth objects", "err", err)
			}
			return
		}
		// The providers it keeps objects for are the snapshot's: a reload publishes a new
		// snapshot at once, and the writer deletes the objects of removed providers.
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Error("ProviderHealth writer stopped", "err", err)
		}
	}()
	return done, nil
}
