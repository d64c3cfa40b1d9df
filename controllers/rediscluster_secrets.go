package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// DefaultSecretResync is how often the password is read again from its Secret. Between reads
// the reconciler keeps it in memory, so the periodic health check costs no API request for it.
const DefaultSecretResync = time.Minute

// credentials are what the nodes read at start, as last synced from the Secrets.
type credentials struct {
	password string
	// previous is the password before the last change, while running nodes may still have it.
	previous   string
	generation int64
	syncedAt   time.Time
}

// errSecret is a password Secret the user must fix: missing, or without the key.
var errSecret = errors.New("password Secret")

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch

// The password's lifecycle: read (or generated), written into the file the nodes include, and
// given to running nodes live when it changes.

// reconcileSecrets reads the password (creating a random one when spec.auth is not set) and
// applies the Secret holding the password file the nodes include. Secrets are read by name with
// an uncached reader: the operator never lists or watches Secrets.
func (r *RedisClusterReconciler) reconcileSecrets(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	cs := r.clusterState(rc)
	cs.mu.Lock()
	creds := cs.creds
	cs.mu.Unlock()
	resync := r.SecretResync
	if resync == 0 {
		resync = DefaultSecretResync
	}
	if creds.password != "" && creds.generation == rc.Generation && time.Since(creds.syncedAt) < resync {
		state.creds = creds
		return nil
	}

	password, err := r.readPassword(ctx, rc)
	if errors.Is(err, errSecret) {
		return failed(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil {
		return err
	}
	desired := resources.DesiredAuthConfSecret(rc, password)
	err = r.applyChild(ctx, rc, state, "Secret", child[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: &corev1.Secret{}, extract: corev1ac.ExtractSecret,
		reader: r.APIReader,
	})
	if err != nil {
		return err
	}
	previous := creds.previous
	if creds.password != "" && creds.password != password {
		previous = creds.password
	}
	creds = credentials{password: password, previous: previous, generation: rc.Generation, syncedAt: time.Now()}
	cs.mu.Lock()
	cs.creds = creds
	cs.mu.Unlock()
	state.creds = creds
	return nil
}

func (r *RedisClusterReconciler) readPassword(ctx context.Context, rc *cachev1.RedisCluster) (string, error) {
	name, key := resources.PasswordSource(rc)
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, nameOf(rc, name), secret)
	if apierrors.IsNotFound(err) && rc.Spec.Auth == nil {
		generated := resources.GeneratedPasswordSecret(rc, resources.RandomPassword())
		if err := r.Create(ctx, generated); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating password Secret %s: %w", name, err)
		}
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildCreated, "Apply",
			"Created Secret %s with a random password", name)
		err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
	}
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w %s not found in namespace %s", errSecret, name, rc.Namespace)
	}
	if err != nil {
		return "", fmt.Errorf("reading password Secret %s: %w", name, err)
	}
	password, ok := secret.Data[key]
	if !ok || len(password) == 0 {
		return "", fmt.Errorf("%w %s has no key %q", errSecret, name, key)
	}
	return string(password), nil
}

// reconcilePasswords gives the current password to the nodes that refuse it but take the
// previous one: the password Secret changed under running nodes. The change is live (CONFIG
// SET), so no pod restarts for it, and a node that restarts reads the new password file. A node
// that refuses both leaves the RedisCluster Degraded (AuthenticationFailed), and nothing is
// decided on half a view until it takes a password again.
func (r *RedisClusterReconciler) reconcilePasswords(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	refused := state.view.AuthRefused()
	if len(refused) == 0 {
		return nil
	}
	if state.creds.previous != "" {
		rotated := topology.RotatePasswords(ctx, state.view, state.creds.password, r.Dial(state.creds.previous))
		for _, node := range rotated {
			r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
				"%s now takes the password from Secret %s", node, passwordSecretName(rc))
		}
		if len(rotated) > 0 {
			state.view = topology.Observe(ctx, r.Dial(state.creds.password), state.members, state.view.Primary)
			refused = state.view.AuthRefused()
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("redis on %s refused the password from Secret %s: %w", refused[0].Name, passwordSecretName(rc), refused[0].Err)
}

func passwordSecretName(rc *cachev1.RedisCluster) string {
	name, _ := resources.PasswordSource(rc)
	return name
}
