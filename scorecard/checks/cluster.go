package checks

import (
	"context"
	"fmt"
	"sort"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Our own tests, which need the operator running in a cluster.
const (
	SampleBecomesReady           = "sample-becomes-ready"
	StatusDescriptorsMatchStatus = "status-descriptors-match-status"
)

// Cluster is what the cluster tests need: a client and the namespace to work in.
type Cluster struct {
	Client    client.Client
	Namespace string
	// Timeout bounds how long a RedisCluster may take to become Ready.
	Timeout time.Duration
}

// Online lists the tests that need a cluster, by name.
var Online = map[string]func(context.Context, Cluster, string) scapiv1alpha3.TestStatus{
	SampleBecomesReady:           onlineTest(SampleBecomesReady, checkSampleBecomesReady),
	StatusDescriptorsMatchStatus: onlineTest(StatusDescriptorsMatchStatus, checkStatusDescriptorsMatchStatus),
}

func onlineTest(name string, check func(context.Context, Cluster, *apimanifests.Bundle, *result)) func(context.Context, Cluster, string) scapiv1alpha3.TestStatus {
	return func(ctx context.Context, c Cluster, dir string) scapiv1alpha3.TestStatus {
		r := newResult(name)
		b, err := LoadBundle(dir)
		if err != nil {
			r.broken(err)
			return r.status()
		}
		check(ctx, c, b, r)
		return r.status()
	}
}

// checkSampleBecomesReady creates each alm-example and waits until its Ready condition is True.
func checkSampleBecomesReady(ctx context.Context, c Cluster, b *apimanifests.Bundle, r *result) {
	withReadyExamples(ctx, c, b, r, func(*unstructured.Unstructured) {})
}

// checkStatusDescriptorsMatchStatus: the status the operator writes has exactly the fields the
// CSV's statusDescriptors describe, so the OLM console shows all of it and nothing missing.
func checkStatusDescriptorsMatchStatus(ctx context.Context, c Cluster, b *apimanifests.Bundle, r *result) {
	withReadyExamples(ctx, c, b, r, func(live *unstructured.Unstructured) {
		status, _, _ := unstructured.NestedMap(live.Object, "status")
		described := map[string]bool{}
		for _, owned := range b.CSV.Spec.CustomResourceDefinitions.Owned {
			if owned.Kind != live.GetKind() {
				continue
			}
			for _, d := range owned.StatusDescriptors {
				described[firstSegment(d.Path)] = true
			}
		}
		var written []string
		for field := range status {
			written = append(written, field)
			if !described[field] {
				r.fail("the operator writes status.%s of %s, but no statusDescriptor describes it", field, live.GetName())
			}
		}
		sort.Strings(written)
		r.logf("%s status fields: %v", live.GetName(), written)
		spec, _, _ := unstructured.NestedMap(live.Object, "spec")
		for field := range described {
			if !writtenFor(field, spec) {
				continue
			}
			if _, ok := status[field]; !ok {
				r.fail("statusDescriptor %s describes a field the operator does not write on a Ready %s", field, live.GetKind())
			}
		}
	})
}

// writtenFor is false for a status field the operator does not write for this spec:
// status.restore, status.backup and status.shards report on spec.restore, spec.backup and
// spec.cluster, and status.primary is one primary's, while cluster mode has one per shard.
func writtenFor(field string, spec map[string]any) bool {
	if on, ok := specOnly[field]; ok {
		if _, set := spec[on]; !set {
			return false
		}
	}
	if off, ok := specAbsent[field]; ok {
		if _, set := spec[off]; set {
			return false
		}
	}
	return true
}

// specOnly are the status fields that report on a spec field, written only when the spec has
// it: status field -> spec field.
var specOnly = map[string]string{"restore": "restore", "backup": "backup", "shards": "cluster"}

// specAbsent are the status fields written only when the spec lacks a field: status field ->
// spec field.
var specAbsent = map[string]string{"primary": "cluster"}

// readyKinds are the kinds whose examples become Ready on their own. A RedisBackup needs a
// RedisCluster, an object store and its credentials: its example shows the shape only.
var readyKinds = map[string]bool{"RedisCluster": true}

// withReadyExamples creates every alm-example of a kind that reports Ready in the test
// namespace, waits until it is Ready, hands the live object to check, and deletes it.
func withReadyExamples(ctx context.Context, c Cluster, b *apimanifests.Bundle, r *result, check func(*unstructured.Unstructured)) {
	examples, err := Examples(b)
	if err != nil {
		r.broken(err)
		return
	}
	for i := range examples {
		if !readyKinds[examples[i].GetKind()] {
			r.logf("%s %s: not created, it needs objects outside the bundle", examples[i].GetKind(), examples[i].GetName())
			continue
		}
		ex := examples[i].DeepCopy()
		ex.SetNamespace(c.Namespace)
		// A name of its own: tests run in parallel in one namespace, maybe beside the user's.
		ex.SetGenerateName(ex.GetName() + "-")
		ex.SetName("")
		if err := c.Client.Create(ctx, ex); err != nil {
			r.broken(fmt.Errorf("creating %s %s: %w", ex.GetKind(), ex.GetName(), err))
			return
		}
		live, err := waitReady(ctx, c, ex)
		if err != nil {
			r.fail("%s %s did not become Ready within %s: %v", ex.GetKind(), ex.GetName(), c.Timeout, err)
		} else {
			r.logf("%s %s is Ready", ex.GetKind(), ex.GetName())
			check(live)
		}
		if err := c.Client.Delete(ctx, ex); client.IgnoreNotFound(err) != nil {
			r.logf("deleting %s: %v", ex.GetName(), err)
		}
	}
}

func waitReady(ctx context.Context, c Cluster, ex *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ex.GroupVersionKind())
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, c.Timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(ex), live); err != nil {
			return false, err
		}
		var conds []metav1.Condition
		raw, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
		for _, item := range raw {
			m, _ := item.(map[string]any)
			cond := metav1.Condition{}
			cond.Type, _ = m["type"].(string)
			s, _ := m["status"].(string)
			cond.Status = metav1.ConditionStatus(s)
			cond.Reason, _ = m["reason"].(string)
			conds = append(conds, cond)
		}
		if ready := meta.FindStatusCondition(conds, "Ready"); ready != nil {
			last = ready.Reason
		}
		return meta.IsStatusConditionTrue(conds, "Ready"), nil
	})
	if err != nil && last != "" {
		return nil, fmt.Errorf("%w (last Ready reason: %s)", err, last)
	}
	return live, err
}

// firstSegment is the top-level field a descriptor's path starts with: "nodes" of
// "nodes[0].role", "primary" of "primary".
func firstSegment(path string) string {
	for i, c := range path {
		if c == '.' || c == '[' {
			return path[:i]
		}
	}
	return path
}
