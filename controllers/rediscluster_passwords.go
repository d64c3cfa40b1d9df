package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// A password change, step by step, each step safe to crash after:
//  1. The Secret holds a new password; the nodes' file (<name>-auth-conf) the old one. The old
//     one is written to <name>-auth-previous with the time it stops working
//     (spec.auth.previousPasswordValidFor from now). A change that comes while an older one
//     still works retires that older one: it is kept there too, to be removed at once.
//  2. The file lists both passwords (a node that restarts takes both) and gives replicas the new
//     one (masterauth).
//  3. Each running node that refuses the new password is given it beside the old one (ACL
//     SETUSER >new), logged in with the old one: clients keep working with either.
//  4. When the time is up, the file lists the new one alone; then, with every node answering,
//     each is told to refuse the old one (and the retired ones); then <name>-auth-previous is
//     deleted.
// The state lives in those two Secrets, never only in memory: an operator that starts at any
// point reads them and goes on.

// rotation is the state of a password change, as <name>-auth-previous keeps it.
type rotation struct {
	// previous is the password before the last change: the nodes take it until until.
	previous string
	until    time.Time
	// retired are older passwords a later change cut short: removed from the nodes at once.
	retired []string
	// read is true once the Secret was read by this process: as its only writer, the operator
	// then follows it in memory.
	read bool
}

// stillValid is what the nodes take beside current at now: the previous password, in its time.
func (rot rotation) stillValid(current string, now time.Time) []string {
	if rot.previous != "" && rot.previous != current && now.Before(rot.until) {
		return []string{rot.previous}
	}
	return nil
}

// candidates are the passwords a node that refuses the current one may still take, newest first.
func (rot rotation) candidates() []string {
	var out []string
	if rot.previous != "" {
		out = append(out, rot.previous)
	}
	for i := len(rot.retired) - 1; i >= 0; i-- {
		out = append(out, rot.retired[i])
	}
	return out
}

// due are the passwords to remove from the nodes now: the retired ones, and the previous one
// once its time is up and the file no longer lists it. Never current (a change back to an
// older password).
func (rot rotation) due(current string, now time.Time, previousInFile bool) []string {
	var out []string
	for _, p := range rot.retired {
		if p != current && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if rot.previous != "" && !now.Before(rot.until) && !previousInFile && rot.previous != current {
		out = append(out, rot.previous)
	}
	return out
}

// started is the rotation after the nodes' file was found with old while the Secret holds
// current: old becomes the previous password, valid for validFor; a previous one still in its
// time is retired. Found again (an operator that restarted between steps 1 and 2), it is kept.
func (rot rotation) started(old, current string, now time.Time, validFor time.Duration) (rotation, bool) {
	if old == current || old == rot.previous {
		return rot, false
	}
	if rot.previous != "" && rot.previous != current {
		rot.retired = append(slices.Clone(rot.retired), rot.previous)
	}
	rot.previous, rot.until = old, now.Add(validFor)
	return rot, true
}

// readRotation reads <name>-auth-previous: an empty rotation when there is none.
func (r *RedisClusterReconciler) readRotation(ctx context.Context, rc *cachev1.RedisCluster) (rotation, error) {
	secret := &corev1.Secret{}
	name := resources.PreviousPasswordSecretName(rc)
	switch err := r.APIReader.Get(ctx, nameOf(rc, name), secret); {
	case apierrors.IsNotFound(err):
		return rotation{read: true}, nil
	case err != nil:
		return rotation{}, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	rot := rotation{previous: string(secret.Data[resources.PasswordKey]), read: true}
	if until, err := time.Parse(time.RFC3339Nano, secret.Annotations[resources.AnnotationPreviousValidUntil]); err == nil {
		rot.until = until
	} // no time (written before it was kept): its time is up
	for i := 0; ; i++ {
		p, ok := secret.Data[resources.RetiredPasswordKey(i)]
		if !ok {
			break
		}
		rot.retired = append(rot.retired, string(p))
	}
	return rot, nil
}

// writeRotation keeps the rotation in <name>-auth-previous, or deletes it when nothing is left
// to remove from the nodes.
func (r *RedisClusterReconciler) writeRotation(ctx context.Context, rc *cachev1.RedisCluster, rot rotation) error {
	name := resources.PreviousPasswordSecretName(rc)
	if rot.previous == "" && len(rot.retired) == 0 {
		secret := &corev1.Secret{}
		secret.Name, secret.Namespace = name, rc.Namespace
		if err := r.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s: %w", name, err)
		}
		return nil
	}
	if err := r.Apply(ctx, resources.DesiredPreviousPasswordSecret(rc, rot.previous, rot.until, rot.retired), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("keeping the previous password in Secret %s: %w", name, err)
	}
	return nil
}

// reconcilePasswords gives the current password to the nodes that refuse it but take a previous
// one (step 3), and removes the previous passwords whose time is up (step 4). The changes are
// live, so no pod restarts for them. A node that refuses every password leaves the
// RedisCluster Degraded (AuthenticationFailed), and nothing is decided on half a view until it
// takes a password again.
func (r *RedisClusterReconciler) reconcilePasswords(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	rot := state.creds.rotation
	refused := state.everyNode().AuthRefused()
	// A node that refuses the operator's own login is reached as the default user, with the
	// current password first (a node without the operator's user yet: it started before its
	// file listed it), then the previous ones (the password changed). It is given the current
	// password and the operator's user.
	candidates := append([]string{state.creds.password}, rot.candidates()...)
	operatorUser := resources.OperatorUser(state.creds.operatorPassword, rc.Spec.Cluster != nil)
	repair := auth.RepairLogin(state.creds.password, operatorUser)
	for i, candidate := range candidates {
		if len(refused) == 0 {
			break
		}
		login := state.creds.login()
		login.Username, login.Password = "", candidate
		rotated := topology.RepairLogins(ctx, state.everyNode(), r.Dial(login), repair)
		for _, node := range rotated {
			if i == 0 {
				log.FromContext(ctx).Info("Gave a node the operator's own user", "node", node)
				continue
			}
			r.Recorder.Eventf(rc, podNamed(state.pods, node), corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
				"%s now takes the password from Secret %s", node, passwordSecretName(rc))
		}
		if len(rotated) > 0 {
			if err := state.mode.observe(ctx, rc, state); err != nil {
				return err
			}
			refused = state.everyNode().AuthRefused()
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("redis on %s refused the password from Secret %s: %w", refused[0].Name, passwordSecretName(rc), refused[0].Err)
	}
	if err := r.givePassword(ctx, rc, state, operatorUser); err != nil {
		return err
	}
	return r.removeDuePasswords(ctx, rc, state)
}

// givePassword is step 3: each running node takes the default user's current password beside
// the ones it has, and the operator's own user as this build defines it. The password is
// checked once per password, and again after each read of the Secrets (a node that restarted
// before its file changed, or whose password was changed behind our back), and given only when
// the node does not take it yet. The operator's user is given once per node by each operator
// process (a node made by an earlier build may lack a right this one needs: MIGRATE, to move
// slots), and again when a node refuses it a command (runPhases): reading it back to compare
// would cost as much as giving it.
func (r *RedisClusterReconciler) givePassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, operator resources.User) error {
	want := resources.PasswordHash(state.creds.password)
	wantOperator := usersSum([]resources.User{operator})
	cs := r.clusterState(rc)
	for _, o := range state.everyNode().Nodes {
		if !o.Reachable() {
			continue
		}
		if cs.passwords.givenTo(o.Name) != want {
			n := state.dial(o.Addr)
			err := auth.GivePassword(ctx, n, state.creds.password)
			n.Close()
			if err != nil {
				return fmt.Errorf("giving %s the password from Secret %s: %w", o.Name, passwordSecretName(rc), err)
			}
			if cs.passwords.gave(o.Name, want, state.creds.rotation.previous != "") {
				r.Recorder.Eventf(rc, podNamed(state.pods, o.Name), corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
					"%s now takes the password from Secret %s", o.Name, passwordSecretName(rc))
			}
		}
		if cs.operatorUser.givenTo(o.Name) != wantOperator {
			n := state.dial(o.Addr)
			err := auth.SetUser(ctx, n, operator)
			n.Close()
			if err != nil {
				return fmt.Errorf("giving %s the operator's own user: %w", o.Name, err)
			}
			cs.operatorUser.accept(o.Name, wantOperator, nil, true)
		}
	}
	return nil
}

// removeDuePasswords is step 4: with every node answering, each refuses the passwords whose
// time is up; then the rotation's Secret forgets them.
func (r *RedisClusterReconciler) removeDuePasswords(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	rot := state.creds.rotation
	due := rot.due(state.creds.password, time.Now(), state.creds.previousInFile)
	if len(due) == 0 {
		return nil
	}
	nodes := state.everyNode().Nodes
	for _, o := range nodes {
		if !o.Reachable() {
			return nil // a node that comes back must lose them too: wait for it
		}
	}
	for _, o := range nodes {
		n := state.dial(o.Addr)
		err := auth.RemovePasswords(ctx, n, due)
		n.Close()
		if err != nil {
			return fmt.Errorf("removing a previous password from %s: %w", o.Name, err)
		}
	}
	left := rotation{read: true}
	if rot.previous != "" && !slices.Contains(due, rot.previous) {
		left.previous, left.until = rot.previous, rot.until
	}
	if err := r.writeRotation(ctx, rc, left); err != nil {
		return err
	}
	r.clusterState(rc).creds.rotated(state.creds.password, left)
	state.creds.rotation = left
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventPreviousPasswordRemoved, "Rotate",
		"The password Secret %s held before no longer works on any node", passwordSecretName(rc))
	return nil
}

// passwordMemory is, by node, the hash of the default user's password it was last given (again
// after each read of the Secrets), and the one its Event announced.
type passwordMemory struct {
	mu               sync.Mutex
	given, announced map[string]string
}

func (m *passwordMemory) givenTo(node string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.given[node]
}

// gave records that node takes the password of hash want; it says whether to announce it: a
// change of password (rotating) is announced once per node.
func (m *passwordMemory) gave(node, want string, rotating bool) (announce bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.given == nil {
		m.given, m.announced = map[string]string{}, map[string]string{}
	}
	m.given[node] = want
	announce = rotating && m.announced[node] != want
	m.announced[node] = want
	return announce
}

// forgetGiven makes every node be checked again.
func (m *passwordMemory) forgetGiven() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.given = nil
}
