package credentials

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
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
func readRotation(ctx context.Context, c *scope.Cluster) (rotation, error) {
	secret := &corev1.Secret{}
	name := resources.PreviousPasswordSecretName(c.RC)
	switch err := c.APIReader.Get(ctx, c.NameOf(name), secret); {
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
func writeRotation(ctx context.Context, c *scope.Cluster, rot rotation) error {
	name := resources.PreviousPasswordSecretName(c.RC)
	if rot.previous == "" && len(rot.retired) == 0 {
		secret := &corev1.Secret{}
		secret.Name, secret.Namespace = name, c.RC.Namespace
		if err := c.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s: %w", name, err)
		}
		return nil
	}
	desired := resources.DesiredPreviousPasswordSecret(c.RC, rot.previous, rot.until, rot.retired)
	if err := c.Client.Apply(ctx, desired, client.FieldOwner(scope.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("keeping the previous password in Secret %s: %w", name, err)
	}
	return nil
}

// Passwords gives the current password to the nodes that refuse it but take a previous one
// (step 3), and removes the previous passwords whose time is up (step 4). The changes are live,
// so no pod restarts for them. A node that refuses every password leaves the RedisCluster
// Degraded (AuthenticationFailed), and nothing is decided on half a view until it takes a
// password again.
func Passwords(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	rc := c.RC
	refused := c.Nodes().AuthRefused()
	// A node that refuses the operator's own login is reached as the default user, with the
	// current password first (a node without the operator's user yet: it started before its
	// file listed it), then the previous ones (the password changed). It is given the current
	// password and the operator's user.
	candidates := append([]string{s.password}, s.rotation.candidates()...)
	operatorUser := resources.OperatorUser(s.operatorPassword, rc.Spec.Cluster != nil)
	repair := auth.RepairLogin(s.password, operatorUser)
	for i, candidate := range candidates {
		if len(refused) == 0 {
			break
		}
		login := s.Login()
		login.Username, login.Password = "", candidate
		rotated := topology.RepairLogins(ctx, c.Nodes(), c.DialAs(login), repair)
		for _, node := range rotated {
			if i == 0 {
				log.FromContext(ctx).Info("Gave a node the operator's own user", "node", node)
				continue
			}
			c.Recorder.Eventf(rc, c.PodNamed(node), corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
				"%s now takes the password from Secret %s", node, passwordSecretName(rc))
		}
		if len(rotated) > 0 {
			if err := c.Observe(ctx); err != nil {
				return err
			}
			refused = c.Nodes().AuthRefused()
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("redis on %s refused the password from Secret %s: %w", refused[0].Name, passwordSecretName(rc), refused[0].Err)
	}
	if err := givePassword(ctx, c, m, s, operatorUser); err != nil {
		return err
	}
	return removeDuePasswords(ctx, c, m, s)
}

// givePassword is step 3: each running node takes the default user's current password beside
// the ones it has, and the operator's own user as this build defines it. The password is
// checked once per password, and again after each read of the Secrets (a node that restarted
// before its file changed, or whose password was changed behind our back), and given only when
// the node does not take it yet. The operator's user is given once per node by each operator
// process (a node made by an earlier build may lack a right this one needs: MIGRATE, to move
// slots), and again when a node refuses it a command (ForgetOperatorUser): reading it back to
// compare would cost as much as giving it.
func givePassword(ctx context.Context, c *scope.Cluster, m *Memory, s *State, operator resources.User) error {
	rc := c.RC
	want := resources.PasswordHash(s.password)
	rotating := s.rotation.previous != ""
	nodes := c.Nodes().Nodes
	_, err := auth.Give(ctx, nodes, auth.Gift{Sum: want, Given: &m.passwords, Dial: c.Dial,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			if err := auth.GivePassword(ctx, n, s.password); err != nil {
				return false, fmt.Errorf("giving %s the password from Secret %s: %w", o.Name, passwordSecretName(rc), err)
			}
			// A change of password is announced once per node.
			if rotating && m.announced.To(o.Name) != want {
				m.announced.Gave(o.Name, want)
				c.Recorder.Eventf(rc, c.PodNamed(o.Name), corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
					"%s now takes the password from Secret %s", o.Name, passwordSecretName(rc))
			}
			return true, nil
		}})
	if err != nil {
		return err
	}
	_, err = auth.Give(ctx, nodes, auth.Gift{Sum: usersSum([]resources.User{operator}), Given: &m.operatorUser, Dial: c.Dial,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			if err := auth.SetUser(ctx, n, operator); err != nil {
				return false, fmt.Errorf("giving %s the operator's own user: %w", o.Name, err)
			}
			return true, nil
		}})
	return err
}

// removeDuePasswords is step 4: with every node answering, each refuses the passwords whose
// time is up; then the rotation's Secret forgets them.
func removeDuePasswords(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	rot := s.rotation
	due := rot.due(s.password, time.Now(), s.previousInFile)
	if len(due) == 0 {
		return nil
	}
	nodes := c.Nodes().Nodes
	took, err := auth.Give(ctx, nodes, auth.Gift{AllOrNone: true, Dial: c.Dial,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			if err := auth.RemovePasswords(ctx, n, due); err != nil {
				return false, fmt.Errorf("removing a previous password from %s: %w", o.Name, err)
			}
			return true, nil
		}})
	if err != nil || len(took) < len(nodes) {
		return err // or a node does not answer, and must lose them too when it comes back
	}
	left := rotation{read: true}
	if rot.previous != "" && !slices.Contains(due, rot.previous) {
		left.previous, left.until = rot.previous, rot.until
	}
	if err := writeRotation(ctx, c, left); err != nil {
		return err
	}
	m.creds.rotated(s.password, left)
	s.rotation = left
	c.Recorder.Eventf(c.RC, nil, corev1.EventTypeNormal, cachev1.EventPreviousPasswordRemoved, "Rotate",
		"The password Secret %s held before no longer works on any node", passwordSecretName(c.RC))
	return nil
}
