package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
)

// DefaultSecretResync is how often the password is read again from its Secret. Between reads
// the reconciler keeps it in memory, so the periodic health check costs no API request for it.
const DefaultSecretResync = time.Minute

// secretReadTimeout bounds reading the password Secret again: a reconcile must not wait on an
// API server that does not answer when it already has the password.
const secretReadTimeout = 5 * time.Second

// credentials are what the nodes read at start, as last synced from the Secrets.
type credentials struct {
	// password is the default user's, from the user's Secret (or the generated one).
	password string
	// operatorPassword is the operator's own user's, generated once into <name>-operator.
	operatorPassword string
	// rotation is the state of the last password change: the passwords running nodes may
	// still take.
	rotation rotation
	// previousInFile is true while the nodes' password file lists the previous password.
	previousInFile bool
	// users are spec.users with their passwords; userProblems name those whose password could
	// not be read.
	users        []resources.User
	userProblems []string
	// fileStale is true when the nodes' password file must be written again (Redis took a user
	// it does not list yet).
	fileStale bool
	// tls is the RedisCluster's TLS Secret as read, when spec.tls is set.
	tls        *tlsCredentials
	generation int64
	syncedAt   time.Time
}

// credsMemory is the credentials of one RedisCluster as last read, kept between reconciles.
type credsMemory struct {
	mu sync.Mutex
	c  credentials
}

func (m *credsMemory) get() credentials {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c
}

func (m *credsMemory) set(c credentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.c = c
}

// markFileStale asks for the nodes' password file to be written again at the next reconcile.
func (m *credsMemory) markFileStale() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.c.fileStale = true
}

// rotated records what is left of a password change, unless the password changed meanwhile.
func (m *credsMemory) rotated(password string, left rotation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.password == password {
		m.c.rotation = left
	}
}

// login is how the operator logs in to the nodes: as its own user, and with TLS when it is on.
func (c credentials) login() auth.Login {
	l := auth.Login{Username: resources.OperatorUserName, Password: c.operatorPassword}
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
	creds := cs.creds.get()
	keep := func(c credentials) {
		cs.creds.set(c)
		state.creds = c
	}
	if r.credentialsFresh(rc, creds) {
		state.creds = creds
		return nil
	}
	readCtx, cancel := context.WithTimeout(ctx, secretReadTimeout)
	defer cancel()
	read, err := r.readSecrets(readCtx, rc, state, creds.tls)
	var invalid *outcome.Failure
	if err != nil && !errors.As(err, &invalid) && creds.readFor(rc) {
		// The API server does not answer (its etcd may be down): go on with the passwords the
		// nodes have, so that Redis is still looked after, and read them again a resync period
		// later, not at every health check.
		log.FromContext(ctx).Info("Could not read the Secrets again; using the ones read before", "error", err.Error())
		creds.syncedAt = time.Now()
		keep(creds)
		return nil
	}
	if err != nil {
		return err
	}
	authConf, found, err := r.readPasswordFile(readCtx, rc, read.generated)
	if err != nil {
		return err
	}
	now := time.Now()
	rot, err := r.rotationFor(ctx, readCtx, rc, creds.rotation, authConf, found, read.password, now)
	if err != nil {
		return err
	}
	stillValid := rot.stillValid(read.password, now)
	inFile := append([]resources.User{resources.OperatorUser(read.operatorPassword, rc.Spec.Cluster != nil)},
		usersForFile(read.users, string(authConf.Data[resources.AuthConfKey]), cs.users.acceptedLines())...)
	desired := resources.DesiredAuthConfSecret(rc, read.password, stillValid, inFile)
	err = r.applyChild(ctx, rc, state, "Secret", child[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: authConf, extract: corev1ac.ExtractSecret,
		read: found, missing: !found,
	})
	if err != nil {
		return err
	}
	keep(credentials{password: read.password, operatorPassword: read.operatorPassword, rotation: rot, previousInFile: len(stillValid) > 0,
		users: read.users, userProblems: read.userProblems, tls: read.tls, generation: rc.Generation, syncedAt: time.Now()})
	// The users and the password are given to every node again after each read: a node that
	// restarted before its file listed them, or whose password was changed behind our back, has
	// them within a resync.
	cs.users.forgetGiven()
	cs.passwords.forgetGiven()
	return nil
}

// readFor is true when the credentials were read for this generation of the spec.
func (c credentials) readFor(rc *cachev1.RedisCluster) bool {
	return c.password != "" && c.generation == rc.Generation
}

// credentialsFresh is true when the credentials in hand need not be read again: read for this
// generation within the resync period, with no previous password whose time is up (its file
// must drop it before the nodes do) and a password file that lists what Redis took.
func (r *RedisClusterReconciler) credentialsFresh(rc *cachev1.RedisCluster, c credentials) bool {
	resync := r.SecretResync
	if resync == 0 {
		resync = DefaultSecretResync
	}
	previousEnds := c.previousInFile && !time.Now().Before(c.rotation.until)
	return c.readFor(rc) && time.Since(c.syncedAt) < resync && !previousEnds && !c.fileStale
}

// readPasswordFile reads the nodes' password file as it is; found is false when there is none.
// A password generated a moment ago is in no password file yet.
func (r *RedisClusterReconciler) readPasswordFile(ctx context.Context, rc *cachev1.RedisCluster, generated bool) (authConf *corev1.Secret, found bool, err error) {
	authConf = &corev1.Secret{}
	if generated {
		return authConf, false, nil
	}
	switch err := r.APIReader.Get(ctx, nameOf(rc, resources.AuthConfSecretName(rc)), authConf); {
	case err == nil:
		return authConf, true, nil
	case apierrors.IsNotFound(err):
		return authConf, false, nil
	default:
		return nil, false, fmt.Errorf("reading Secret %s: %w", resources.AuthConfSecretName(rc), err)
	}
}

// rotationFor is the state of the password change, as kept (last) or read from
// <name>-auth-previous, and started when the password file still has another password than
// password: step 1, the old password is kept before the file changes, since the running nodes
// have it until they are given the new one.
func (r *RedisClusterReconciler) rotationFor(ctx, readCtx context.Context, rc *cachev1.RedisCluster, last rotation, authConf *corev1.Secret, found bool, password string, now time.Time) (rotation, error) {
	rot := last
	switch {
	case !found:
		// No password file yet, so no node has had a password to change from.
		return rotation{read: true}, nil
	case !rot.read:
		var err error
		if rot, err = r.readRotation(readCtx, rc); err != nil {
			return rot, err
		}
	}
	if old, ok := resources.PasswordInAuthConf(string(authConf.Data[resources.AuthConfKey])); ok {
		var started bool
		if rot, started = rot.started(old, password, now, rc.PreviousPasswordValidFor()); started {
			if err := r.writeRotation(ctx, rc, rot); err != nil {
				return rot, outcome.Fail(cachev1.ReasonApplyFailed, err)
			}
		}
	}
	return rot, nil
}

// secretsRead is what one read of the RedisCluster's Secrets found.
type secretsRead struct {
	password         string
	generated        bool
	operatorPassword string
	users            []resources.User
	userProblems     []string
	tls              *tlsCredentials
}

// readSecrets reads the password, the operator's own, the users' and the TLS Secret. An error
// the user must fix is an outcome.Failure with its reason; any other is the API server's.
func (r *RedisClusterReconciler) readSecrets(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, lastTLS *tlsCredentials) (secretsRead, error) {
	var out secretsRead
	var err error
	out.password, out.generated, err = r.readPassword(ctx, rc, state)
	if errors.Is(err, errSecret) {
		return out, outcome.Fail(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil {
		return out, err
	}
	out.operatorPassword, err = r.readOperatorPassword(ctx, rc, state)
	if errors.Is(err, errSecret) {
		return out, outcome.Fail(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil {
		return out, err
	}
	if out.users, out.userProblems, err = r.readUsers(ctx, rc); err != nil {
		return out, err
	}
	out.tls, err = r.readTLS(ctx, rc, lastTLS)
	return out, err
}

// readPassword reads the password from its Secret. Without spec.auth the operator generates it
// (generatedPassword), and says so (generated).
func (r *RedisClusterReconciler) readPassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) (password string, generated bool, err error) {
	name, key := resources.PasswordSource(rc)
	if rc.Spec.Auth == nil {
		return r.generatedPassword(ctx, rc, state, name, resources.GeneratedPasswordSecret, "a random password", "")
	}
	secret := &corev1.Secret{}
	err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
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

// readOperatorPassword reads the operator's own password, which it generates once.
func (r *RedisClusterReconciler) readOperatorPassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) (string, error) {
	password, _, err := r.generatedPassword(ctx, rc, state, resources.OperatorSecretName(rc), resources.OperatorSecret,
		"the operator's own password", ": delete it, and the operator makes a new one")
	return password, err
}

// generatedPassword reads the password of a Secret the operator generates (name, made by
// build), creating it with a random password when it is missing; generated says it was created
// now. A RedisCluster that has never been reconciled has none yet, almost always: it is created
// at once and read only when it is there after all, which saves a new RedisCluster two of its
// requests for each. note names the Secret in the Created Event; hint follows a missing key.
func (r *RedisClusterReconciler) generatedPassword(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState,
	name string, build func(*cachev1.RedisCluster, string) *corev1.Secret, note, hint string) (password string, generated bool, err error) {
	create := func() (string, bool, error) {
		password := resources.RandomPassword()
		secret := build(rc, password)
		switch err := r.Create(ctx, secret); {
		case apierrors.IsAlreadyExists(err):
			return "", false, nil // there after all: its password is the one to read
		case err != nil:
			return "", false, fmt.Errorf("creating password Secret %s: %w", name, err)
		}
		state.created = append(state.created, "Secret "+name+" ("+note+")")
		log.FromContext(ctx).Info("Created child", "kind", "Secret", "child", klog.KObj(secret))
		return password, true, nil
	}
	if rc.Status.ObservedGeneration == 0 {
		if password, created, err := create(); err != nil || created {
			return password, created, err
		}
	}
	secret := &corev1.Secret{}
	err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
	if apierrors.IsNotFound(err) {
		if password, created, err := create(); err != nil || created {
			return password, created, err
		}
		err = r.APIReader.Get(ctx, nameOf(rc, name), secret)
	}
	if err != nil {
		return "", false, fmt.Errorf("reading password Secret %s: %w", name, err)
	}
	value := secret.Data[resources.PasswordKey]
	if len(value) == 0 {
		return "", false, fmt.Errorf("%w %s has no key %q%s", errSecret, name, resources.PasswordKey, hint)
	}
	return string(value), false, nil
}

func passwordSecretName(rc *cachev1.RedisCluster) string {
	name, _ := resources.PasswordSource(rc)
	return name
}
