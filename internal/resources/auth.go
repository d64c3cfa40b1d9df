package resources

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
)

const (
	// AuthConfKey is the key of the password file in the <name>-auth-conf Secret.
	AuthConfKey = "auth.conf"
	// PasswordKey is the key of the generated password in <name>-auth, and of the current
	// password in <name>-auth-conf (for the pod's own tools: the preStop hook).
	PasswordKey = "password"
	// AuthDir is where the pod mounts the auth-conf Secret.
	AuthDir = "/etc/redis-auth"
)

// PasswordSecretName names the Secret the operator generates when spec.auth is not set.
func PasswordSecretName(rc *cachev1.RedisCluster) string {
	return rc.Name + cachev1.GeneratedPasswordSecretSuffix
}

// AuthConfSecretName names the Secret holding the password file Redis includes.
func AuthConfSecretName(rc *cachev1.RedisCluster) string {
	return rc.Name + cachev1.AuthConfSecretSuffix
}

// PreviousPasswordSecretName names the Secret holding the password the nodes had before the
// last change, kept until they all take the new one.
func PreviousPasswordSecretName(rc *cachev1.RedisCluster) string {
	return rc.Name + cachev1.PreviousPasswordSecretSuffix
}

// PasswordSource is the Secret and key the password is read from.
func PasswordSource(rc *cachev1.RedisCluster) (name, key string) {
	if rc.Spec.Auth != nil {
		return rc.Spec.Auth.SecretRef.Name, SecretKey(rc.Spec.Auth.SecretRef)
	}
	return PasswordSecretName(rc), PasswordKey
}

// GeneratedPasswordSecret is the Secret created once, when spec.auth is not set. Its password is
// never changed by the operator afterwards.
func GeneratedPasswordSecret(rc *cachev1.RedisCluster, password string) *corev1.Secret {
	s := &corev1.Secret{}
	s.Name, s.Namespace = PasswordSecretName(rc), rc.Namespace
	s.Labels = Labels(rc)
	s.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: cachev1.GroupVersion.String(), Kind: "RedisCluster", Name: rc.Name, UID: rc.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	s.Type = corev1.SecretTypeOpaque
	s.Data = map[string][]byte{PasswordKey: []byte(password)}
	return s
}

// RandomPassword is 32 characters from a 62-letter alphabet: about 190 bits.
func RandomPassword() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([]byte, 0, 32)
	buf := make([]byte, 64)
	for len(out) < cap(out) {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		for _, b := range buf {
			// Bytes past the last whole multiple of 62 would favour the first letters.
			if int(b) < 4*len(alphabet) && len(out) < cap(out) {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// DesiredAuthConfSecret holds the password file Redis includes from redis.conf: the password
// and, while it still works, the one before it, then the users of spec.users that Redis took;
// and the current password alone (key password), which the pod's preStop hook logs in with.
func DesiredAuthConfSecret(rc *cachev1.RedisCluster, password string, stillValid []string, users []User) *corev1ac.SecretApplyConfiguration {
	conf := AuthConf(password, stillValid...)
	for _, u := range users {
		conf += u.Line() + "\n"
	}
	return corev1ac.Secret(AuthConfSecretName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{AuthConfKey: []byte(conf), PasswordKey: []byte(password)})
}

// OperatorUserName is the ACL user the operator logs in as.
const OperatorUserName = "redis-operator"

// operatorRules are the commands the operator sends, and nothing else: it reads INFO, moves
// replication (REPLICAOF, CLIENT PAUSE/UNPAUSE/KILL), changes passwords and users (CONFIG SET
// masterauth, ACL GETUSER/SETUSER/DELUSER/USERS), reloads TLS files (CONFIG GET/SET), names its
// connections and subscribes to its watch channel; it takes backups as a replica would (SYNC,
// REPLCONF), which hands it a snapshot of the data; and nothing else: no key and no data
// command, so it cannot change the applications' data.
const operatorRules = "resetchannels &redis-operator:watch -@all +auth +ping +info +client|setname +client|pause " +
	"+client|unpause +client|kill +replicaof +config|get +config|set +acl|getuser +acl|setuser +acl|deluser +acl|users +subscribe +sync +replconf"

// operatorClusterRules are the operator's rights in cluster mode on top: it reads and forms the
// cluster (CLUSTER NODES, INFO, MEET, ADDSLOTSRANGE, REPLICATE, FORGET), hands a shard to its
// replica before it replaces the primary's pod (CLUSTER FAILOVER), and moves slots between
// shards (CLUSTER SETSLOT, GETKEYSINSLOT, and MIGRATE, which logs in to the receiving node as
// the same user and sends it SELECT and RESTORE-ASKING). Moving keys needs access to every key
// (~*): the operator can then move any key to another node, but still has no command that reads
// a value or writes one of its own making.
const operatorClusterRules = " +cluster|nodes +cluster|info +cluster|meet +cluster|addslotsrange +cluster|replicate +cluster|forget" +
	" +cluster|failover +cluster|setslot +cluster|getkeysinslot +migrate +select +restore-asking ~*"

// OperatorUser is the operator's own user, with its password; cluster is true in cluster mode.
func OperatorUser(password string, cluster bool) User {
	rules := operatorRules
	if cluster {
		rules += operatorClusterRules
	}
	return User{Name: OperatorUserName, Password: password, Rules: strings.Fields(rules)}
}

// OperatorSecretName names the Secret holding the operator's own password, generated once.
func OperatorSecretName(rc *cachev1.RedisCluster) string {
	return rc.Name + cachev1.OperatorSecretSuffix
}

// OperatorSecret is the Secret of the operator's password.
func OperatorSecret(rc *cachev1.RedisCluster, password string) *corev1.Secret {
	s := GeneratedPasswordSecret(rc, password)
	s.Name = OperatorSecretName(rc)
	return s
}

// User is a user of spec.users with its password and its rules, split into ACL arguments
// (cachev1.SplitUserRules).
type User struct {
	Name, Password string
	Rules          []string
}

// Line is the user's ACL definition, as a redis.conf user directive and as ACL SETUSER's
// arguments: reset (no rights, no password, nothing left from before), on, its password as a
// SHA-256 hash, then its rules. The API lets through only rules of cachev1.UserRulesPattern.
func (u User) Line() string {
	return "user " + u.Name + " " + strings.Join(u.SetUserArgs(), " ")
}

// SetUserArgs are the ACL SETUSER arguments after the name.
func (u User) SetUserArgs() []string {
	return append([]string{"reset", "on", "#" + PasswordHash(u.Password)}, u.Rules...)
}

// PasswordHash is how Redis's ACL names a password: its SHA-256, in hex.
func PasswordHash(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

// AnnotationPreviousValidUntil on the previous password's Secret is when that password stops
// working (RFC 3339): the state of a rotation, kept in the API so that any operator process
// finishes it.
const AnnotationPreviousValidUntil = "cache.example.com/valid-until"

// DesiredPreviousPasswordSecret keeps the state of a password change: the password the nodes
// had before it (key password), which they take beside the new one until validUntil, and older
// ones a later change retired (keys retired-N), which are removed from the nodes at once. It is
// written before the nodes' password file changes, so that an operator that restarts meanwhile
// can still log in with them and remove them in time. It is not mounted into any pod.
func DesiredPreviousPasswordSecret(rc *cachev1.RedisCluster, previous string, validUntil time.Time, retired []string) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{PasswordKey: []byte(previous)}
	for i, p := range retired {
		data[RetiredPasswordKey(i)] = []byte(p)
	}
	return corev1ac.Secret(PreviousPasswordSecretName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithAnnotations(map[string]string{AnnotationPreviousValidUntil: validUntil.UTC().Format(time.RFC3339Nano)}).
		WithOwnerReferences(ownerReference(rc)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}

// RetiredPasswordKey is the key of the i-th retired password in the previous password's Secret.
func RetiredPasswordKey(i int) string { return "retired-" + strconv.Itoa(i) }

// PasswordInAuthConf is the password an AuthConf file gives (its masterauth: the one replicas
// use, the current one); false when conf is not one.
func PasswordInAuthConf(conf string) (string, bool) {
	for _, line := range strings.Split(conf, "\n") {
		if quoted, ok := strings.CutPrefix(line, "masterauth "); ok {
			return unquoteConfValue(quoted)
		}
	}
	return "", false
}

func unquoteConfValue(quoted string) (string, bool) {
	if len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' || (len(quoted)-2)%4 != 0 {
		return "", false
	}
	var out []byte
	for esc := quoted[1 : len(quoted)-1]; esc != ""; esc = esc[4:] {
		b, err := hex.DecodeString(esc[2:4])
		if esc[:2] != `\x` || err != nil {
			return "", false
		}
		out = append(out, b...)
	}
	return string(out), true
}

// AuthConf is the redis.conf fragment of the password: the default user, which takes the
// password and each of stillValid (Redis 7 users hold several passwords), given as SHA-256
// hashes; and masterauth, the password a replica gives its primary, with every byte written as
// a \xHH escape inside double quotes, so no character of it can end the value or start another
// directive. It lives in a Secret, never in the ConfigMap or in argv.
func AuthConf(password string, stillValid ...string) string {
	var b strings.Builder
	b.WriteString("user default on")
	for _, p := range append([]string{password}, stillValid...) {
		if p == "" {
			b.WriteString(" nopass") // no password: auth off (the operator never has an empty one)
			continue
		}
		b.WriteString(" #" + PasswordHash(p))
	}
	b.WriteString(" ~* &* +@all\n")
	b.WriteString("masterauth " + quoteConfValue(password) + "\n")
	return b.String()
}

func quoteConfValue(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&b, `\x%02x`, v[i])
	}
	b.WriteByte('"')
	return b.String()
}
