package crdwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// PodRef names the pod a replica runs in, as the downward API gives it (metadata.name,
// metadata.uid, and the namespace).
type PodRef struct {
	Namespace, Name, UID string
}

// ownedLeaseLock is client-go's Lease lock (resourcelock.LeaseLock) that also makes the Lease
// owned by the holder's pod whenever this replica acquires or renews it.
//
// Why: a Lease nobody deletes outlives its deployment. The holder releases it when it stops
// (ReleaseOnCancel), but on helm uninstall the release's Role goes with the release, before or
// while its pods stop, so that release is refused and the Lease would stay, its holder set.
// Owned by the holder's pod, the garbage collector deletes it once that pod is gone.
//
// Handover is unchanged: a follower takes the Lease over by updating it, and the owner moves
// with the holder in the same write. The owner only matters once the holder's pod object is
// gone (its containers have stopped): the garbage collector then deletes a Lease nobody renews
// any more, and the next candidate creates it anew (a create is atomic: one wins). The
// collector reads the Lease again before it deletes, so a Lease a live pod took over stays.
type ownedLeaseLock struct {
	client   coordinationclient.LeasesGetter
	ns, name string
	identity string
	owner    []metav1.OwnerReference // nil: no owner
	lease    *coordinationv1.Lease   // the last one read or written
}

func newOwnedLeaseLock(client coordinationclient.LeasesGetter, ns, name, identity string, pod *PodRef) *ownedLeaseLock {
	l := &ownedLeaseLock{client: client, ns: ns, name: name, identity: identity}
	if pod != nil {
		l.owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: types.UID(pod.UID)}}
	}
	return l
}

func (l *ownedLeaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.Leases(l.ns).Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.lease = lease
	record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*record)
	if err != nil {
		return nil, nil, err
	}
	return record, raw, nil
}

func (l *ownedLeaseLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.ns},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.own(lease, ler)
	created, err := l.client.Leases(l.ns).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	return nil
}

func (l *ownedLeaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.lease == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	lease := l.lease.DeepCopy()
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	l.own(lease, ler)
	updated, err := l.client.Leases(l.ns).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
}

// own makes this replica's pod the Lease's owner when ler makes it the holder. A release (an
// empty holder) keeps the owner: the pod that let go is stopping, and the Lease goes with it
// unless a follower takes it over first.
func (l *ownedLeaseLock) own(lease *coordinationv1.Lease, ler resourcelock.LeaderElectionRecord) {
	if l.owner != nil && ler.HolderIdentity == l.identity {
		lease.OwnerReferences = l.owner
	}
}

// RecordEvent records nothing: the writer logs its terms itself.
func (l *ownedLeaseLock) RecordEvent(string) {}

func (l *ownedLeaseLock) Describe() string { return fmt.Sprintf("%v/%v", l.ns, l.name) }

func (l *ownedLeaseLock) Identity() string { return l.identity }
