package credentials

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
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// The users of spec.users: their passwords are read with the other Secrets (phase Secrets); each
// running node is given them live (ACL SETUSER, phase Users) and loses the users no longer
// listed (ACL DELUSER); the nodes' password file lists the users Redis took, so that a node
// that restarts has them, and never a user Redis refused, which would stop it from starting.

// readUsers reads each user's password. A user whose Secret or key is missing is left out and
// named in problems: the other users, and the cluster, go on.
func readUsers(ctx context.Context, c *scope.Cluster) (users []resources.User, problems []string, err error) {
	rc := c.RC
	for _, u := range rc.Spec.Users {
		ref := u.PasswordSecretRef
		key := resources.SecretKey(ref)
		secret := &corev1.Secret{}
		switch err := c.APIReader.Get(ctx, c.NameOf(ref.Name), secret); {
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

// Users gives each running node the users of spec.users and deletes the others, once per set
// of users; a user Redis refuses is reported (UserRejected), the rest applied.
func Users(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	var problems []error
	for _, p := range s.userProblems {
		problems = append(problems, errors.New(p))
	}
	newlyAccepted := false
	_, err := auth.Give(ctx, c.Nodes().Nodes, auth.Gift{Sum: usersSum(s.users), Given: &m.users, Dial: c.Dial, EachNode: true,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			accepted, rejected, err := auth.ApplyUsers(ctx, n, s.users)
			if err != nil {
				return false, fmt.Errorf("giving %s its users: %w", o.Name, err)
			}
			newlyAccepted = m.acceptedUsers.add(accepted) || newlyAccepted
			problems = append(problems, rejected...)
			return len(rejected) == 0, nil
		}})
	if err != nil {
		problems = append(problems, err)
	}
	if newlyAccepted {
		// The password file lists the users Redis took: write it again at the next reconcile.
		m.creds.markFileStale()
	}
	if len(problems) > 0 {
		return outcome.Fail(cachev1.ReasonUserRejected, errors.Join(problems...))
	}
	return nil
}

// acceptedLines are the user lines Redis took, on any node: the password file may list them.
type acceptedLines struct {
	mu    sync.Mutex
	lines map[string]bool
}

// add records lines Redis took; it says whether one was taken for the first time.
func (a *acceptedLines) add(lines []string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lines == nil {
		a.lines = map[string]bool{}
	}
	fresh := false
	for _, line := range lines {
		if !a.lines[line] {
			a.lines[line], fresh = true, true
		}
	}
	return fresh
}

// get is the lines, a copy.
func (a *acceptedLines) get() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.lines)
}
