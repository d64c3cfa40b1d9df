package controllers

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/topology"
)

// Where backups are taken from: the RedisCluster's reconciler observes the nodes and holds
// their credentials, and keeps what the last reconcile saw (observedMemory, each part a backup
// takes a snapshot of); the RedisBackup reconciler asks it here (SnapshotSources).

// errNoSnapshotSource is a RedisCluster that has no node a snapshot can be taken from yet.
var errNoSnapshotSource = errors.New("no node to take a snapshot from")

// SnapshotSources are where a backup of the RedisCluster is taken from, as the last health
// check saw its nodes, and the login the operator uses there: the RedisCluster's reconciler
// owns them. An error says why no backup can be taken now.
func (r *RedisClusterReconciler) SnapshotSources(key types.NamespacedName) ([]backup.Part, auth.Login, error) {
	v, ok := r.clusters.Load(key)
	if !ok {
		return nil, auth.Login{}, fmt.Errorf("%w: the cluster has not been looked at yet", errNoSnapshotSource)
	}
	cs := v.(*clusterState)
	observed := cs.observed.get()
	login, read := cs.creds.Login()
	if observed.unsettled != "" {
		return nil, auth.Login{}, fmt.Errorf("%w: %s", errNoSnapshotSource, observed.unsettled)
	}
	if !read || len(observed.parts) == 0 {
		return nil, auth.Login{}, fmt.Errorf("%w: its credentials have not been read yet", errNoSnapshotSource)
	}
	var out []backup.Part
	for _, p := range observed.parts {
		source, ok := p.view.SnapshotSource()
		if !ok {
			what := "neither a caught-up replica nor the primary answers"
			if p.shard != "" {
				what = "shard " + p.shard + ": " + what
			}
			return nil, auth.Login{}, fmt.Errorf("%w: %s", errNoSnapshotSource, what)
		}
		primary, _ := p.view.Find(p.view.Primary)
		out = append(out, backup.Part{Shard: p.shard, Slots: p.slots, Source: source, Primary: primary})
	}
	return out, login, nil
}

// observedMemory is what the last reconcile observed of the nodes: where backups are taken
// from.
type observedMemory struct {
	mu    sync.Mutex
	nodes observedParts
}

// observedParts are the parts of a RedisCluster a backup takes a snapshot of each: the whole
// cluster in replication mode; each shard in cluster mode, with the slots it serves.
type observedParts struct {
	parts []observedPart
	// unsettled says why no snapshot may be taken now (cluster mode: slots move); empty when
	// one may.
	unsettled string
}

// observedPart is one part's nodes, judged against its primary.
type observedPart struct {
	// shard is the shard's StatefulSet; empty in replication mode.
	shard string
	slots []string
	view  topology.View
}

func (o *observedMemory) set(p observedParts) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.nodes = p
}

func (o *observedMemory) get() observedParts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodes
}
