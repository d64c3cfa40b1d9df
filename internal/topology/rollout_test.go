package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecideRollout(t *testing.T) {
	healthy := View{Primary: "r-0", Nodes: []Observed{
		primaryNode("r-0", 0, 100), replicaNode("r-1", 1, "r-0", true, 90), replicaNode("r-2", 2, "r-0", true, 100),
	}}
	pods := func(outdated ...string) []Pod {
		var out []Pod
		for _, o := range healthy.Nodes {
			p := Pod{Name: o.Name}
			for _, name := range outdated {
				p.Outdated = p.Outdated || name == o.Name
			}
			out = append(out, p)
		}
		return out
	}
	tests := []struct {
		name       string
		view       View
		in         RolloutInput
		wantAction RolloutAction
		wantPod    string
		wantFrom   string
		wantTo     string
	}{
		{
			name: "all up to date: nothing",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: pods(), RevisionKnown: true},
		},
		{
			name: "outdated replicas go first, the highest ordinal first",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: pods("r-0", "r-1", "r-2"), RevisionKnown: true},
			wantAction: RolloutReplacePod, wantPod: "r-2",
		},
		{
			name: "only the primary is outdated: switch over to the up-to-date replica with the most data",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: pods("r-0"), RevisionKnown: true},
			wantAction: RolloutSwitchover, wantFrom: "r-0", wantTo: "r-2",
		},
		{
			name:       "a single outdated node is replaced in place",
			view:       View{Primary: "r-0", Nodes: healthy.Nodes[:1]},
			in:         RolloutInput{Replicas: 1, Pods: pods("r-0")[:1], RevisionKnown: true},
			wantAction: RolloutReplacePod, wantPod: "r-0",
		},
		{
			name: "the revision is not known yet: no pod is replaced",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: pods("r-1"), RevisionKnown: false},
		},
		{
			name: "a replica does not serve: wait",
			view: View{Primary: "r-0", Nodes: []Observed{primaryNode("r-0", 0, 100), replicaNode("r-1", 1, "r-0", false, 90), replicaNode("r-2", 2, "r-0", true, 100)}},
			in:   RolloutInput{Replicas: 3, Pods: pods("r-2"), RevisionKnown: true},
		},
		{
			name: "a pod is still terminating: wait",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: []Pod{{Name: "r-0"}, {Name: "r-1", Terminating: true}, {Name: "r-2", Outdated: true}}, RevisionKnown: true},
		},
		{
			name: "the primary's pod is being deleted (a drain): switch over to the caught-up replica with the most data, even with an outdated pod and the revision unknown",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1", Outdated: true}, {Name: "r-2"}}},
			wantAction: RolloutSwitchover, wantFrom: "r-0", wantTo: "r-2",
		},
		{
			name:       "the primary's pod is being deleted and a replica does not serve: switch over to the one that does",
			view:       View{Primary: "r-0", Nodes: []Observed{primaryNode("r-0", 0, 100), replicaNode("r-1", 1, "r-0", true, 90), downNode("r-2", 2, errRefused)}},
			in:         RolloutInput{Replicas: 3, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1"}, {Name: "r-2"}}},
			wantAction: RolloutSwitchover, wantFrom: "r-0", wantTo: "r-1",
		},
		{
			name: "the primary's pod and the best replica's are both going away: the other replica takes the role",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1"}, {Name: "r-2", Terminating: true}}},
			wantAction: RolloutSwitchover, wantFrom: "r-0", wantTo: "r-1",
		},
		{
			name: "the primary's pod is being deleted and no replica is caught up: nothing (a failover follows if it goes)",
			view: View{Primary: "r-0", Nodes: []Observed{primaryNode("r-0", 0, 100), replicaNode("r-1", 1, "r-0", false, 90)}},
			in:   RolloutInput{Replicas: 2, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1"}}},
		},
		{
			name: "every pod is being deleted (the RedisCluster is): nothing",
			view: healthy, in: RolloutInput{Replicas: 3, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1", Terminating: true}, {Name: "r-2", Terminating: true}}},
		},
		{
			name: "the primary's pod is being deleted but its Redis no longer answers: nothing (the failover's to decide)",
			view: View{Primary: "r-0", Nodes: []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "r-0", true, 90)}},
			in:   RolloutInput{Replicas: 2, Pods: []Pod{{Name: "r-0", Terminating: true}, {Name: "r-1"}}},
		},
		{
			name:       "scale-in removes the primary's pod: switch over to a pod that stays, even before the revision is known",
			view:       View{Primary: "r-2", Nodes: []Observed{replicaNode("r-0", 0, "r-2", true, 80), replicaNode("r-1", 1, "r-2", true, 90), primaryNode("r-2", 2, 100)}},
			in:         RolloutInput{Replicas: 2, Pods: pods()},
			wantAction: RolloutSwitchover, wantFrom: "r-2", wantTo: "r-1",
		},
		{
			name: "an outdated pod whose Redis keeps exiting is replaced even though nothing serves",
			view: View{Primary: "", Nodes: []Observed{downNode("r-0", 0, errRefused), downNode("r-1", 1, errRefused)}},
			in: RolloutInput{Replicas: 2, RevisionKnown: true,
				Pods: []Pod{{Name: "r-0", Outdated: true, Failing: true}, {Name: "r-1", Outdated: true, Failing: true}}},
			wantAction: RolloutReplacePod, wantPod: "r-0",
		},
		{
			name: "a failing pod that already runs the current spec is left to its back-off",
			view: View{Primary: "", Nodes: []Observed{downNode("r-0", 0, errRefused)}},
			in:   RolloutInput{Replicas: 1, RevisionKnown: true, Pods: []Pod{{Name: "r-0", Failing: true}}},
		},
		{
			name: "scale-in, but no replica that stays has caught up: wait",
			view: View{Primary: "r-1", Nodes: []Observed{replicaNode("r-0", 0, "r-1", false, 80), primaryNode("r-1", 1, 100)}},
			in:   RolloutInput{Replicas: 1, Pods: pods()[:2]},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step := DecideRollout(tt.view, tt.in)
			assert.Equal(t, tt.wantAction, step.Action)
			assert.Equal(t, tt.wantPod, step.Pod)
			assert.Equal(t, tt.wantFrom, step.From.Name)
			assert.Equal(t, tt.wantTo, step.To.Name)
			if step.Action != RolloutNone {
				assert.NotEmpty(t, step.Reason+step.Role, "a step says why")
			}
		})
	}
}
