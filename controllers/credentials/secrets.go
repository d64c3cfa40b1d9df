package credentials

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
)

// DefaultSecretResync is how often the password is read again from its Secret. Between reads
// the reconciler keeps it in memory, so the periodic health check costs no API request for it.
const DefaultSecretResync = time.Minute

// secretReadTimeout bounds reading the password Secret again: a reconcile must not wait on an
// API server that does not answer when it already has the password.
const secretReadTimeout = 5 * time.Second

// State is the credentials as one reconcile holds them: what the nodes read at start, as last
// synced from the Secrets.
type State struct {
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
	c  State
}

func (m *credsMemory) get() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c
}

func (m *credsMemory) set(c State) {
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

// Login is how the operator logs in to the nodes: as its own user, and with TLS when it is on.
func (c State) Login() auth.Login {
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

// Secrets reads the password (creating a random one when spec.auth is not set) and applies the
// Secret holding the password file the nodes include; s is then the credentials read, or those
// of the last read while it is fresh (resync, DefaultSecretResync when zero). Secrets are read
// by name with an uncached reader: the operator never lists or watches Secrets.
func Secrets(ctx context.Context, c *scope.Cluster, m *Memory, s *State, resync time.Duration) error {
	rc := c.RC
	creds := m.creds.get()
	keep := func(read State) {
		m.creds.set(read)
		*s = read
	}
	if creds.fresh(rc, resync) {
		*s = creds
		return nil
	}
	readCtx, cancel := context.WithTimeout(ctx, secretReadTimeout)
	defer cancel()
	read, err := readSecrets(readCtx, c, creds.tls)
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
	authConf, found, err := readPasswordFile(readCtx, c, read.generated)
	if err != nil {
		return err
	}
	now := time.Now()
	rot, err := rotationFor(ctx, readCtx, c, creds.rotation, authConf, found, read.password, now)
	if err != nil {
		return err
	}
	stillValid := rot.stillValid(read.password, now)
	inFile := append([]resources.User{resources.OperatorUser(read.operatorPassword, rc.Spec.Cluster != nil)},
		usersForFile(read.users, string(authConf.Data[resources.AuthConfKey]), m.acceptedUsers.get())...)
	desired := resources.DesiredAuthConfSecret(rc, read.password, stillValid, inFile)
	err = scope.Apply(ctx, c, "Secret", scope.Child[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		Desired: desired, Name: c.NameOf(*desired.Name), Live: authConf, Extract: corev1ac.ExtractSecret,
		Read: found, Missing: !found,
	})
	if err != nil {
		return err
	}
	keep(State{password: read.password, operatorPassword: read.operatorPassword, rotation: rot, previousInFile: len(stillValid) > 0,
		users: read.users, userProblems: read.userProblems, tls: read.tls, generation: rc.Generation, syncedAt: time.Now()})
	// The users and the password are given to every node again after each read: a node that
	// restarted before its file listed them, or whose password was changed behind our back, has
	// them within a resync.
	m.users.Forget()
	m.passwords.Forget()
	return nil
}

// readFor is true when the credentials were read for this generation of the spec.
func (c State) readFor(rc *cachev1.RedisCluster) bool {
	return c.password != "" && c.generation == rc.Generation
}

// fresh is true when the credentials in hand need not be read again: read for this generation
// within the resync period, with no previous password whose time is up (its file must drop it
// before the nodes do) and a password file that lists what Redis took.
func (c State) fresh(rc *cachev1.RedisCluster, resync time.Duration) bool {
	if resync == 0 {
		resync = DefaultSecretResync
	}
	previousEnds := c.previousInFile && !time.Now().Before(c.rotation.until)
	return c.readFor(rc) && time.Since(c.syncedAt) < resync && !previousEnds && !c.fileStale
}

// readPasswordFile reads the nodes' password file as it is; found is false when there is none.
// A password generated a moment ago is in no password file yet.
func readPasswordFile(ctx context.Context, c *scope.Cluster, generated bool) (authConf *corev1.Secret, found bool, err error) {
	authConf = &corev1.Secret{}
	if generated {
		return authConf, false, nil
	}
	switch err := c.APIReader.Get(ctx, c.NameOf(resources.AuthConfSecretName(c.RC)), authConf); {
	case err == nil:
		return authConf, true, nil
	case apierrors.IsNotFound(err):
		return authConf, false, nil
	default:
		return nil, false, fmt.Errorf("reading Secret %s: %w", resources.AuthConfSecretName(c.RC), err)
	}
}

// rotationFor is the state of the password change, as kept (last) or read from
// <name>-auth-previous, and started when the password file still has another password than
// password: step 1, the old password is kept before the file changes, since the running nodes
// have it until they are given the new one.
func rotationFor(ctx, readCtx context.Context, c *scope.Cluster, last rotation, authConf *corev1.Secret, found bool, password string, now time.Time) (rotation, error) {
	rot := last
	switch {
	case !found:
		// No password file yet, so no node has had a password to change from.
		return rotation{read: true}, nil
	case !rot.read:
		var err error
		if rot, err = readRotation(readCtx, c); err != nil {
			return rot, err
		}
	}
	if old, ok := resources.PasswordInAuthConf(string(authConf.Data[resources.AuthConfKey])); ok {
		var started bool
		if rot, started = rot.started(old, password, now, c.RC.PreviousPasswordValidFor()); started {
			if err := writeRotation(ctx, c, rot); err != nil {
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
func readSecrets(ctx context.Context, c *scope.Cluster, lastTLS *tlsCredentials) (secretsRead, error) {
	var out secretsRead
	var err error
	out.password, out.generated, err = readPassword(ctx, c)
	if errors.Is(err, errSecret) {
		return out, outcome.Fail(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil {
		return out, err
	}
	out.operatorPassword, err = readOperatorPassword(ctx, c)
	if errors.Is(err, errSecret) {
		return out, outcome.Fail(cachev1.ReasonSecretNotFound, err)
	}
	if err != nil {
		return out, err
	}
	if out.users, out.userProblems, err = readUsers(ctx, c); err != nil {
		return out, err
	}
	out.tls, err = readTLS(ctx, c, lastTLS)
	return out, err
}

// readPassword reads the password from its Secret. Without spec.auth the operator generates it
// (generatedPassword), and says so (generated).
func readPassword(ctx context.Context, c *scope.Cluster) (password string, generated bool, err error) {
	rc := c.RC
	name, key := resources.PasswordSource(rc)
	if rc.Spec.Auth == nil {
		return generatedPassword(ctx, c, name, resources.GeneratedPasswordSecret, "a random password", "")
	}
	secret := &corev1.Secret{}
	err = c.APIReader.Get(ctx, c.NameOf(name), secret)
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
func readOperatorPassword(ctx context.Context, c *scope.Cluster) (string, error) {
	password, _, err := generatedPassword(ctx, c, resources.OperatorSecretName(c.RC), resources.OperatorSecret,
		"the operator's own password", ": delete it, and the operator makes a new one")
	return password, err
}

// generatedPassword reads the password of a Secret the operator generates (name, made by
// build), creating it with a random password when it is missing; generated says it was created
// now. A RedisCluster that has never been reconciled has none yet, almost always: it is created
// at once and read only when it is there after all, which saves a new RedisCluster two of its
// requests for each. note names the Secret in the Created Event; hint follows a missing key.
func generatedPassword(ctx context.Context, c *scope.Cluster,
	name string, build func(*cachev1.RedisCluster, string) *corev1.Secret, note, hint string) (password string, generated bool, err error) {
	rc := c.RC
	create := func() (string, bool, error) {
		password := resources.RandomPassword()
		secret := build(rc, password)
		switch err := c.Client.Create(ctx, secret); {
		case apierrors.IsAlreadyExists(err):
			return "", false, nil // there after all: its password is the one to read
		case err != nil:
			return "", false, fmt.Errorf("creating password Secret %s: %w", name, err)
		}
		c.Created(ctx, "Secret", secret, " ("+note+")")
		return password, true, nil
	}
	if rc.Status.ObservedGeneration == 0 {
		if password, created, err := create(); err != nil || created {
			return password, created, err
		}
	}
	secret := &corev1.Secret{}
	err = c.APIReader.Get(ctx, c.NameOf(name), secret)
	if apierrors.IsNotFound(err) {
		if password, created, err := create(); err != nil || created {
			return password, created, err
		}
		err = c.APIReader.Get(ctx, c.NameOf(name), secret)
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
