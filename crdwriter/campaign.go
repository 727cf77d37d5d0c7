package crdwriter

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/tools/leaderelection"
)

// Leader election: the campaigns for the Lease, each term handed to a session (session.go).

// campaigns runs leader elections until ctx is done: a replica that loses the Lease campaigns
// again, it never stays passive.
func (w *Writer) campaigns(ctx context.Context) error {
	lock := &renewalLock{Interface: newOwnedLeaseLock(w.coord, w.opts.LeaseNamespace, w.opts.LeaseName, w.opts.Identity, w.opts.HolderPod)}
	// Outside a term nothing but the Lease is written.
	w.fence.set(func() bool { return false })
	defer w.fence.set(nil)
	for ctx.Err() == nil {
		if err := w.campaign(ctx, lock); err != nil {
			return err
		}
		if ctx.Err() == nil {
			w.logger.Warn("lost the lease, stopped writing ProviderHealth objects; campaigning again",
				"lease", w.opts.LeaseNamespace+"/"+w.opts.LeaseName, "identity", w.opts.Identity)
		}
	}
	return nil
}

// campaign runs one leader election: waits for the lease, writes while holding it, and returns
// once it is lost (or ctx is done) and every write of this term has stopped.
func (w *Writer) campaign(ctx context.Context, lock *renewalLock) error {
	var (
		mu       sync.Mutex
		over     bool
		active   bool
		finished = make(chan struct{})
		le       *leaderelection.LeaderElector
		err      error
	)
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   w.opts.LeaseDuration,
		RenewDeadline:   w.opts.RenewDeadline,
		RetryPeriod:     w.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            w.opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if over {
					mu.Unlock()
					return
				}
				active = true
				mu.Unlock()
				defer close(finished)
				w.logger.Info("acquired the lease, writing ProviderHealth objects", "identity", w.opts.Identity)
				w.metrics.leader.Set(1)
				defer w.metrics.leader.Set(0)
				w.lead(lctx, &leaseView{isLeader: le.IsLeader, renewed: lock.lastRenewal, renewDeadline: w.opts.RenewDeadline})
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("crdwriter: leader election: %w", err)
	}
	le.Run(ctx)
	// The term's context is cancelled once Run returns; wait until its writes have stopped so
	// that two terms never overlap.
	mu.Lock()
	over = true
	wasActive := active
	mu.Unlock()
	if wasActive {
		<-finished
	}
	return nil
}
