package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
)

// The users of spec.users: their passwords are read with the other Secrets (phase Secrets); each
// running node is given them live (ACL SETUSER, phase Users) and loses the users no longer
// listed (ACL DELUSER); the nodes' password file lists the users Redis took, so that a node
// that restarts has them, and never a user Redis refused, which would stop it from starting.

// readUsers reads each user's password. A user whose Secret or key is missing is left out and
// named in problems: the other users, and the cluster, go on.
func (r *RedisClusterReconciler) readUsers(ctx context.Context, rc *cachev1.RedisCluster) (users []resources.User, problems []string, err error) {
	for _, u := range rc.Spec.Users {
		ref := u.PasswordSecretRef
		key := resources.SecretKey(ref)
		secret := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, nameOf(rc, ref.Name), secret); {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("user %s: password Secret %s not found", u.Name, ref.Name))
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("reading the password Secret %s of user %s: %w", ref.Name, u.Name, err)
		}
		password := secret.Data[key]
		if len(password) == 0 {
			problems = append(problems, fmt.Sprintf("user %s: password Secret %s has no key %q", u.Name, ref.Name, key))
			continue
		}
		rules, err := cachev1.SplitUserRules(string(u.Rules))
		if err != nil {
			// Stored before the API refused such rules: never split them another way.
			problems = append(problems, fmt.Sprintf("user %s: %v", u.Name, err))
			continue
		}
		users = append(users, resources.User{Name: u.Name, Password: string(password), Rules: rules})
	}
	return users, problems, nil
}

// usersForFile are the users the nodes' password file lists: those Redis took, here or in the
// file as it is (each line there was taken before).
func usersForFile(users []resources.User, file string, accepted map[string]bool) []resources.User {
	lines := strings.Split(file, "\n")
	var out []resources.User
	for _, u := range users {
		if accepted[u.Line()] || slices.Contains(lines, u.Line()) {
			out = append(out, u)
		}
	}
	return out
}

// usersSum names a set of users as given to the nodes.
func usersSum(users []resources.User) string {
	h := sha256.New()
	for _, u := range users {
		h.Write([]byte(u.Line() + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// reconcileUsers gives each running node the users of spec.users and deletes the others, once
// per set of users; a user Redis refuses is reported (UserRejected), the rest applied.
func (r *RedisClusterReconciler) reconcileUsers(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	users := state.creds.users
	cs := r.clusterState(rc)
	var problems []error
	for _, p := range state.creds.userProblems {
		problems = append(problems, errors.New(p))
	}
	want := usersSum(users)
	newlyAccepted := false
	for _, o := range state.everyNode().Nodes {
		if !o.Reachable() || cs.users.givenTo(o.Name) == want {
			continue
		}
		n := state.dial(o.Addr)
		accepted, rejected, err := auth.ApplyUsers(ctx, n, users)
		n.Close()
		if err != nil {
			problems = append(problems, fmt.Errorf("giving %s its users: %w", o.Name, err))
			continue
		}
		newlyAccepted = cs.users.accept(o.Name, want, accepted, len(rejected) == 0) || newlyAccepted
		problems = append(problems, rejected...)
	}
	if newlyAccepted {
		// The password file lists the users Redis took: write it again at the next reconcile.
		cs.creds.markFileStale()
	}
	if len(problems) > 0 {
		return outcome.Fail(cachev1.ReasonUserRejected, errors.Join(problems...))
	}
	return nil
}

// userMemory is, by node, the set of users it was last given in full (usersSum), and the user
// lines Redis took.
type userMemory struct {
	mu       sync.Mutex
	given    map[string]string
	accepted map[string]bool
}

// givenTo is the set of users the node was last given in full.
func (m *userMemory) givenTo(node string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.given[node]
}

// accept records what the node took; it says whether a line was taken for the first time.
func (m *userMemory) accept(node, sum string, accepted []string, complete bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.given == nil {
		m.given = map[string]string{}
	}
	if m.accepted == nil {
		m.accepted = map[string]bool{}
	}
	if complete {
		m.given[node] = sum
	}
	fresh := false
	for _, line := range accepted {
		if !m.accepted[line] {
			m.accepted[line], fresh = true, true
		}
	}
	return fresh
}

// acceptedLines are the user lines Redis took, a copy.
func (m *userMemory) acceptedLines() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.accepted)
}

// forgetGiven makes every node be given its users again.
func (m *userMemory) forgetGiven() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.given = nil
}
