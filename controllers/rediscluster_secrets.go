package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// DefaultSecretResync is how often the password is read again from its Secret. Between reads
// the reconciler keeps it in memory, so the periodic health check costs no API request for it.
const DefaultSecretResync = time.Minute

// secretReadTimeout bounds reading the password Secret again: a reconcile must not wait on an
// API server that does not answer when it already has the password.
const secretReadTimeout = 5 * time.Second

// credentials are what the nodes read at start, as last synced from the Secrets.
type credentials struct {
	password string
	// previous is the password before the last change, while running nodes may still have it.
	previous string
	// tls is the RedisCluster's TLS Secret as read, when spec.tls is set.
	tls        *tlsCredentials
	generation int64
	syncedAt   time.Time
}

// login is how the operator logs in to the nodes: the password, and TLS when it is on.
func (c credentials) login() redis.Login {
	l := redis.Login{Password: c.password}
	if c.tls != nil {
		l.TLS = c.tls.config
	}
	return l
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
	keep := func(c credentials) {
		cs.mu.Lock()
		cs.creds = c
		cs.mu.Unlock()
		state.creds = c
	}
	resync := r.SecretResync
	if resync == 0 {
		resync = DefaultSecretResync
	}
	// inHand is a password read for this generation of the spec.
	inHand := creds.password != "" && creds.generation == rc.Generation
	if inHand && time.Since(creds.syncedAt) < resync {
		state.creds = creds
		return nil
	}

	readCtx, cancel := context.WithTimeout(ctx, secretReadTimeout)
	defer cancel()
	password, generated, err := r.readPassword(readCtx, rc, state)
	if errors.Is(err, errSecret) {
		return failed(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil && inHand {
		// The API server does not answer (its etcd may be down): go on with the password the
		// nodes have, so that Redis is still looked after, and read it again a resync period
		// later, not at every health check.
		log.FromContext(ctx).Info("Could not read the password Secret again; using the one read before", "error", err.Error())
		creds.syncedAt = time.Now()
		keep(creds)
		return nil
	}
	if err != nil {
		return err
	}
	tlsCreds, err := r.readTLS(readCtx, rc, creds.tls)
	var invalid *phaseError
	if err != nil && !errors.As(err, &invalid) && inHand {
		log.FromContext(ctx).Info("Could not read the TLS Secret again; using the one read before", "error", err.Error())
		creds.syncedAt = time.Now()
		keep(creds)
		return nil
	}
	if err != nil {
		return err
	}
	// The nodes' password file as it is. A password that did not exist a moment ago is in no
	// password file yet.
	authConf := &corev1.Secret{}
	found := false
	if !generated {
		switch err := r.APIReader.Get(readCtx, nameOf(rc, resources.AuthConfSecretName(rc)), authConf); {
		case err == nil:
			found = true
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading Secret %s: %w", resources.AuthConfSecretName(rc), err)
		}
	}
	previous := creds.previous
	if old, ok := resources.PasswordInAuthConf(string(authConf.Data[resources.AuthConfKey])); ok && old != password {
		// The password changed: the running nodes have the old one until they are given the
		// new one. It is kept in a Secret before their file changes, so that an operator that
		// restarts in between can still log in to them.
		if err := r.Apply(ctx, resources.DesiredPreviousPasswordSecret(rc, old), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return failed(cachev1.ReasonApplyFailed, fmt.Errorf("keeping the previous password in Secret %s: %w", resources.PreviousPasswordSecretName(rc), err))
		}
		previous = old
	}
	desired := resources.DesiredAuthConfSecret(rc, password)
	err = r.applyChild(ctx, rc, state, "Secret", child[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: authConf, extract: corev1ac.ExtractSecret,
		read: found, missing: !found,
	})
	if err != nil {
		return err
	}
	keep(credentials{password: password, previous: previous, tls: tlsCreds, generation: rc.Generation, syncedAt: time.Now()})
	return nil
}

// previousPassword is the password the nodes had before the last change: kept in memory since
// this operator saw the change, or read from where it was kept when the change happened
// before (another operator process, or this one before a restart). Empty when there is none.
func (r *RedisClusterReconciler) previousPassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) (string, error) {
	if state.creds.previous != "" {
		return state.creds.previous, nil
	}
	secret := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, nameOf(rc, resources.PreviousPasswordSecretName(rc)), secret); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading Secret %s: %w", resources.PreviousPasswordSecretName(rc), err)
	}
	previous := string(secret.Data[resources.PasswordKey])
	cs := r.clusterState(rc)
	cs.mu.Lock()
	if cs.creds.password == state.creds.password {
		cs.creds.previous = previous
	}
	cs.mu.Unlock()
	state.creds.previous = previous
	return previous, nil
}

// readPassword reads the password from its Secret. Without spec.auth it creates the Secret
// with a random password when it is missing, and says so (generated).
func (r *RedisClusterReconciler) readPassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) (password string, generated bool, err error) {
	name, key := resources.PasswordSource(rc)
	if rc.Spec.Auth == nil && rc.Status.ObservedGeneration == 0 {
		// A RedisCluster that has never been reconciled has no password Secret yet, almost
		// always: create it at once, and read it only when it is there after all. This saves
		// a new RedisCluster two of its three Secret requests.
		if password, created, err := r.createPasswordSecret(ctx, rc, state); err != nil || created {
			return password, created, err
		}
	}
	secret := &corev1.Secret{}
	err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
	if apierrors.IsNotFound(err) && rc.Spec.Auth == nil {
		if password, created, err := r.createPasswordSecret(ctx, rc, state); err != nil || created {
			return password, created, err
		}
		err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
	}
	if apierrors.IsNotFound(err) {
		return "", false, fmt.Errorf("%w %s not found in namespace %s", errSecret, name, rc.Namespace)
	}
	if err != nil {
		return "", false, fmt.Errorf("reading password Secret %s: %w", name, err)
	}
	value, ok := secret.Data[key]
	if !ok || len(value) == 0 {
		return "", false, fmt.Errorf("%w %s has no key %q", errSecret, name, key)
	}
	return string(value), false, nil
}

// createPasswordSecret creates the generated password Secret. created is false, with no error,
// when the Secret is already there: its password is the one to read.
func (r *RedisClusterReconciler) createPasswordSecret(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) (password string, created bool, err error) {
	password = resources.RandomPassword()
	secret := resources.GeneratedPasswordSecret(rc, password)
	switch err := r.Create(ctx, secret); {
	case apierrors.IsAlreadyExists(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("creating password Secret %s: %w", secret.Name, err)
	}
	state.created = append(state.created, "Secret "+secret.Name+" (a random password)")
	log.FromContext(ctx).Info("Created child", "kind", "Secret", "child", klog.KObj(secret))
	return password, true, nil
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
	previous, err := r.previousPassword(ctx, rc, state)
	if err != nil {
		return err
	}
	if previous != "" {
		old := state.creds.login()
		old.Password = previous
		rotated := topology.RotatePasswords(ctx, state.view, state.creds.password, r.Dial(old))
		for _, node := range rotated {
			r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
				"%s now takes the password from Secret %s", node, passwordSecretName(rc))
		}
		if len(rotated) > 0 {
			state.view = topology.Observe(ctx, state.dial, state.members, state.view.Primary)
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
